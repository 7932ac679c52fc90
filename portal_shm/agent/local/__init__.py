"""The parts of the local ring portal (``agent.vector.VectorPortal``): the session of env servers,
the ring's views, the lockstep and async-batch drivers, control calls, recovery and health.
"""
