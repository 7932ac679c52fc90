"""What every portal kind shares: the gymnasium contract (``base.PortalVectorEnv``), the checks of
a call's arguments and of the options, the un-batcher of infos, the checks of everything an env
server or host sends, and the restart rules. It imports nothing of the other kinds' parts.
"""
