"""Helpers shared by the tests and the benchmarks: comparisons with gymnasium, real env hosts and
Ray clusters on this machine, what ``/proc`` says about their processes, Docker images, envs that
fail on cue, the attacks of the hostile-tenant tests. A helper two test modules use lives here: no
test module imports another (nor a ``conftest.py``, whose place is fixtures).

Not part of the product (``pyproject.toml`` ships ``portal_shm`` alone) and not a test module:
``benchmarks/`` imports it from the repository root without importing ``tests``.
"""
