"""The agent side: ``VectorPortal`` and what drives it (lockstep and async batches, recovery, the
session of servers, the checks of everything servers send), and ``make_vec``/``make`` on top.
"""
