"""Where env servers run: the backends (process, venv, micromamba, docker, attach) behind one small
interface, and how their runtimes are built, cached and collected when their agent is gone.
"""
