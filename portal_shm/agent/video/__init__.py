"""Video of envs that live in other runtimes: the ``RecordVideo`` wrapper and its encoder."""
