"""The agent's side of remote envs: what runs in the training process (``RemoteVectorPortal``)."""
