"""Multi-agent envs (PettingZoo) over a vector portal: agent groups, batches and the flat view."""
