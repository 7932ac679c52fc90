"""Recycling as one unit: a server generation's wear against the policy (``wear.py``) and the
recycler that keeps warm spares and swaps due servers, asked by the step for its plan.
"""
