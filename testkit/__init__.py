"""Helpers shared by the tests and the benchmarks: comparisons with gymnasium, real env hosts and
Ray clusters on this machine, what ``/proc`` says about their processes.

Not part of the product (``pyproject.toml`` ships ``portal_shm`` alone) and not a test module:
``benchmarks/`` imports it from the repository root without importing ``tests``.
"""
