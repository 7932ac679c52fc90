"""What every portal kind reports about where the time goes: the agent's clock, the bottleneck
verdict and the report ``portal-shm top`` reads.
"""
