"""The env host's side of remote envs: what runs on the machine next to the envs (``portal-shm host``)."""
