"""How an env server starts: its config from the agent, its envs, the handshake, and the exits.

Start it with ``python -m portal_shm.server`` (what the backends do) or call ``serve(factory)`` from
an image's entry script; either way the agent passes its connection details in the config, a
private file named by ``$PORTAL_SHM_SERVER_CONFIG`` or ``--config`` (``portal_shm.wire.launch``).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
from typing import Any, Callable, Optional

import zmq

from ..wire.launch import CONFIG_ENV_VAR, decode_config
from ..wire.protocol import packb
from .envs import LegacyEnv, is_legacy, load_entry_point, make_env
from .import_path import adopt
from .loop import AgentGone, EnvServer, error_message
from .native import is_batched, make_batched
from .sizes import cap_of, fitted


def _create_envs(config: dict, factory: Optional[Callable[..., Any]]) -> list:
    adopt(config.get("import_path"))
    spec = config.get("env") or {}
    kwargs = dict(spec.get("kwargs") or {})
    factories = _load_factories(spec) if spec.get("factories") else None
    wrappers = _load_code(spec["wrappers"], "wrappers") if spec.get("wrappers") else []
    if factories is None:
        batched_factory = factory if factory is not None else _batched_entry_point(spec.get("id"))
        if batched_factory is not None and is_batched(batched_factory):
            if wrappers:
                raise TypeError(
                    f"{spec.get('id')} is a native vector env (it steps all its envs at once): the per-env "
                    "wrappers cannot wrap it; wrap the envs inside its entry point instead"
                )
            return make_batched(batched_factory, len(config["env_indices"]), kwargs, config.get("num_servers"))
    envs = []
    for j, _ in enumerate(config["env_indices"]):
        if factories is not None:
            env = factories[j]()
        else:
            env = factory(**kwargs) if factory is not None else make_env(spec["id"], kwargs)
        for wrapper in wrappers:  # as gymnasium.make_vec(wrappers=...) applies them, in turn
            env = wrapper(env)
        legacy = spec.get("legacy")
        if legacy or (legacy is None and is_legacy(env)):
            env = LegacyEnv(env)
        envs.append(env)
    return envs


def _batched_entry_point(env_id: Optional[str]) -> Optional[Callable[..., Any]]:
    """The entry point ``env_id`` names, where it is one (``module:callable``)."""
    return load_entry_point(env_id) if isinstance(env_id, str) and ":" in env_id else None


def _load_factories(spec: dict) -> list:
    """The env factories (callables) the agent shipped for this server's envs, one per env."""
    _need_cloudpickle("env factories")
    if spec.get("registry"):
        _add_registrations(spec["registry"])
    return _load_code(spec["factories"], "env factories")


def _need_cloudpickle(what: str) -> None:
    try:
        import cloudpickle  # noqa: F401  (unpickling its output needs it importable)
    except ImportError:
        raise RuntimeError(
            f"this runtime cannot load {what} (callables): cloudpickle is not installed in it; "
            "add 'cloudpickle' to its requirements, or pass an env id or 'module:callable' entry point"
        ) from None


def _load_code(path: str, what: str) -> list:
    """The callables the agent shipped (env factories, one per env; or wrappers, applied in turn).

    They come pickled with cloudpickle in a file of the agent's private run directory: code the
    agent sends to the runtime it started, never the other way round. The modules they name import
    on the agent's import path, which ``_create_envs`` put first on ``sys.path`` (``import_path.py``).
    """
    _need_cloudpickle(what)
    import pickle

    with open(path, "rb") as handle:
        code = pickle.load(handle)
    if not isinstance(code, list) or not all(callable(f) for f in code):
        raise TypeError(f"the shipped {what} are not a list of callables")
    return code


def _add_registrations(path: str) -> None:
    """The agent's gymnasium registrations (as forked AsyncVectorEnv workers inherit them); a runtime
    without gymnasium, or ids it registered itself, keep their own."""
    import pickle

    try:
        import gymnasium
    except ImportError:
        return
    with open(path, "rb") as handle:
        specs = pickle.load(handle)
    registry = gymnasium.envs.registry
    for env_id, env_spec in specs.items():
        registry.setdefault(env_id, env_spec)


def run(config: dict, factory: Optional[Callable[..., Any]] = None, envs: Optional[list] = None) -> int:
    """Create the envs (unless a zygote forked this server with its copies: ``envs``), shake
    hands with the agent and serve until closed; returns an exit code. A zygote's config
    (``zygote_socket``) runs the zygote instead (``zygote.py``)."""
    if config.get("zygote_socket"):
        from .zygote import run_zygote

        return run_zygote(config, lambda: _create_envs(config, factory), lambda c, e: run(c, factory, e))
    server = None
    try:
        if envs is None:
            envs = _create_envs(config, factory)
    except Exception as exc:
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 5000)
        socket.connect(config["control_address"])
        message = error_message(exc, None, "make")
        message["env_index"] = int(config["env_indices"][0])
        data = packb(message)
        socket.send(fitted(data, message, cap_of(config), "make", config["env_indices"]) or data)
        socket.close()
        context.term()
        return 3
    server = EnvServer(config, envs)
    server.watch_agent()
    agent_gone = False
    try:
        server.handshake()
        server.serve_forever()
        return 0
    except AgentGone:
        agent_gone = True
        return 0
    finally:
        server.cleanup(agent_gone)


def load_config(argv: Optional[list] = None, worker: Optional[list] = None) -> Optional[dict]:
    """The agent's config; None when started with ``--listen ADDRESS`` (then it has been served)."""
    parser = argparse.ArgumentParser(prog="python -m portal_shm.server", description=__doc__)
    parser.add_argument(
        "--config",
        help=f"the agent's config: file:PATH (read and removed), b64:MSGPACK or JSON (default: ${CONFIG_ENV_VAR})",
    )
    parser.add_argument(
        "--listen", metavar="ADDRESS", help="run as a long-lived listener at ADDRESS (ipc://PATH) that agents attach to"
    )
    args, _ = parser.parse_known_args(argv)
    if args.listen:
        from .listener import listen, worker_command

        listen(args.listen, worker or worker_command([sys.executable] + sys.argv))
        return None
    raw = args.config or os.environ.get(CONFIG_ENV_VAR)
    if not raw:
        parser.error(f"no config: pass --config JSON or set {CONFIG_ENV_VAR}; the agent's backend does this")
    return decode_config(raw)


def serve(env_factory: Callable[..., Any], config: Optional[dict] = None) -> None:
    """Serve envs made by ``env_factory(**env_kwargs)``: the body of an image's entry script."""
    faulthandler.enable()
    config = config or load_config()
    sys.exit(0 if config is None else run(config, env_factory))


def main(argv: Optional[list] = None) -> None:
    faulthandler.enable()
    config = load_config(argv, worker=[sys.executable, "-m", "portal_shm.server"])
    sys.exit(0 if config is None else run(config))
