"""The agent side. ``contract/`` is what every portal kind shares (the gymnasium contract, option
and reply checks); ``stats/`` the agent's clock and verdicts; ``local/`` the parts of the ring
portal, composed by ``vector.VectorPortal``; ``recycle/`` the warm spares and swaps; ``video/``
and ``multi_agent/`` wrappers over any kind. Layers (import-linter checks them) run one way:
wrappers > ``vector`` > ``recycle`` > ``local`` > ``stats`` > ``contract``.
"""
