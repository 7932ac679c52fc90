"""``portal-shm host`` (serve envs to agents on other machines) and ``portal-shm keys`` (CURVE key pairs)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Optional

from rich.markup import escape

from .args import positive_float, positive_int, positive_seconds
from .console import error_text, make_console

console = make_console()
err_console = make_console(stderr=True)


def cmd_host(args: argparse.Namespace) -> int:
    """Run the env host daemon until Ctrl-C or SIGTERM."""
    from ..errors import PortalError
    from ..remote.host.daemon import HostOptions, run_host

    _log_to_stdout_and_stderr()
    try:
        policy = host_policy(args)
    except PortalError as exc:
        err_console.print(error_text(str(exc)))
        return 2
    options = HostOptions(
        bind=args.bind,
        keys_dir=args.keys,
        clients_dir=args.clients,
        insecure=args.insecure,
        max_envs=args.max_envs,
        max_envs_per_agent=args.max_envs_per_agent,
        policy=policy,
        heartbeat_timeout=args.heartbeat_timeout,
        step_timeout=args.step_timeout,
        max_sessions=args.max_sessions,
        max_sessions_per_agent=args.max_sessions_per_agent,
        max_fds=args.max_fds,
        max_unacked_bytes=args.max_unacked_bytes,
        max_message_bytes=args.max_message_bytes,
        max_decoded_bytes=args.max_decoded_bytes,
    )
    if args.insecure:
        console.print(
            "[bold red]warning:[/] --insecure: env traffic is plain text and anyone who reaches "
            f"{escape(args.bind)} can start the envs this host allows"
        )
    try:
        run_host(options)
    except PortalError as exc:  # a flag the host cannot apply (an interpreter that is not there, a port in use)
        err_console.print(error_text(str(exc)))
        return 2
    return 0


def _size(text: str) -> int:
    """A byte count for a flag: bytes, or a size such as '64m', '1g'."""
    from ..errors import HostPolicyError
    from ..remote.host.policy import parse_bytes

    try:
        return parse_bytes(int(text) if text.isdigit() else text, "size")
    except HostPolicyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_limits(host: argparse.ArgumentParser) -> None:
    """What one tenant may make the host hold; a hello past a limit is refused, naming its flag."""
    from ..remote.host.quotas import Limits

    limits = host.add_argument_group(
        "limits per agent key and per host (checked before a session starts; stats() and top show usage)"
    )
    d = Limits()
    limits.add_argument(
        "--max-envs", type=positive_int, default=d.max_envs, help="envs of all agents together (default %(default)s)"
    )
    limits.add_argument(
        "--max-envs-per-agent",
        type=positive_int,
        default=d.max_envs_per_agent,
        help="envs per agent key (default %(default)s)",
    )
    limits.add_argument(
        "--max-sessions",
        type=positive_int,
        default=d.max_sessions,
        help="sessions of all agents together (default %(default)s)",
    )
    limits.add_argument(
        "--max-sessions-per-agent",
        type=positive_int,
        default=d.max_sessions_per_agent,
        help="sessions per agent key (default %(default)s)",
    )
    limits.add_argument(
        "--max-fds",
        type=positive_int,
        default=None,
        help="file descriptors the host may hold (default: 3/4 of its ulimit -n)",
    )
    sizes = (
        ("--max-unacked-bytes", d.max_unacked_bytes, "replies a session may leave unacknowledged before it is dropped"),
        ("--max-message-bytes", d.max_message_bytes, "bytes of one message from an agent"),
        ("--max-decoded-bytes", d.max_decoded_bytes, "bytes the arrays of one message from an agent may declare"),
    )
    for flag, default, what in sizes:
        limits.add_argument(
            flag, type=_size, default=default, metavar="SIZE", help=f"{what} (default {default >> 20}m)"
        )


def _log_to_stdout_and_stderr() -> None:
    """The host's log: INFO (its start-up banner with the key to pin, sessions, its shutdown) on
    stdout, warnings and errors (refusals, lost agents) on stderr."""
    form = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    root = logging.getLogger()
    for handler in (out, err):
        handler.setFormatter(form)
        root.addHandler(handler)
    root.setLevel(logging.INFO)


def _list(text: Optional[str]) -> Optional[tuple]:
    return None if text is None else tuple(part.strip() for part in text.split(",") if part.strip())


def _named(pairs: list, flag: str) -> dict:
    from ..errors import PortalError

    out = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise PortalError(f"{flag} {pair!r}: give NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def host_policy(args: argparse.Namespace) -> Any:
    """The ``HostPolicy`` of ``portal-shm host``'s flags."""
    from ..remote.host.policy import HostPolicy

    defaults = HostPolicy()
    return HostPolicy(
        runtimes=_list(args.runtimes),
        envs=_list(args.envs),
        plugins=_list(args.plugins) if args.plugins is not None else defaults.plugins,
        entry_points=_list(args.entry_points) if args.entry_points is not None else defaults.entry_points,
        images=_list(args.images),
        max_mem=args.max_mem,
        max_cpus=args.max_cpus,
        max_pids=args.max_pids,
        pythons={k: os.path.abspath(os.path.expanduser(v)) for k, v in _named(args.python, "--python").items()},
        venvs=_named(args.venv, "--venv"),
        micromambas={
            k: os.path.abspath(os.path.expanduser(v)) for k, v in _named(args.micromamba, "--micromamba").items()
        },
        agent_installs=args.agent_installs,
        pickled_states=args.pickled_states,
        env_kwargs=_list(args.env_kwargs) or (),
        calls=_list(args.calls) if args.calls is not None else defaults.calls,
        size_caps={**defaults.size_caps, **_size_caps(args.size_cap)},
        max_ring_bytes=args.max_ring_bytes,
    )


def _size_caps(given: Optional[list]) -> dict:
    """``--size-cap NAME=N`` flags as {name: N}."""
    from ..errors import PortalError

    caps = {}
    for name, value in _named(given, "--size-cap").items():
        if not value.isdigit() or int(value) < 1:
            raise PortalError(f"--size-cap {name}={value}: give a positive integer")
        caps[name] = int(value)
    return caps


def cmd_keys_create(args: argparse.Namespace) -> int:
    """A new key pair: NAME.key (public, give it to the other side) and NAME.key_secret (0600)."""
    from ..remote.keys import create_key_pair, default_key_name, default_keys_dir, public_key

    directory = args.dir or default_keys_dir()
    public_path, secret_path = create_key_pair(directory, args.name or default_key_name())
    lines = (
        f"public key {public_key(public_path, 'keys').decode()} in {public_path}",
        f"secret key in {secret_path} (mode 600: keep it on this machine)",
        f"give each host {public_path} (into its clients directory, ~/.config/portal-shm/host/clients)",
    )
    for line in lines:
        console.print(line, highlight=False, markup=False)
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    """Print the public key of a key file (a .key or .key_secret path, or a name in the keys directory)."""
    from ..remote.keys import default_client_key, default_keys_dir, public_key

    if args.key is None:
        path = default_client_key()
    else:
        path = args.key if os.path.exists(args.key) else os.path.join(default_keys_dir(), args.key + ".key")
    console.print(public_key(path, "keys").decode(), highlight=False, markup=False)
    return 0


def add_remote_commands(commands: argparse._SubParsersAction) -> None:
    from ..remote.host.options import DEFAULT_STEP_TIMEOUT

    host = commands.add_parser(
        "host",
        help="serve envs to agents on other machines (one port, CURVE by default)",
        description='Serve envs to agents on other machines (make_vec(..., backend="remote", address=...)) on one '
        "port, encrypted and authenticated with CURVE keys by default. Agents run only what the flags below allow, "
        "within the limits below; a request past them is refused, naming the flag. Runs until Ctrl-C or SIGTERM.",
        epilog="example: portal-shm host --bind tcp://0.0.0.0:5555 --envs 'ALE/*' --max-envs-per-agent 64",
    )
    host.add_argument(
        "--bind", default="tcp://0.0.0.0:5555", help="tcp://ADDRESS:PORT to listen on (default %(default)s)"
    )
    host.add_argument(
        "--keys",
        default=None,
        metavar="DIR",
        help="the host's key pair, made on first start (default ~/.config/portal-shm/host)",
    )
    host.add_argument(
        "--clients",
        default=None,
        metavar="DIR",
        help="public keys (*.key) of the agents it serves (default <keys>/clients)",
    )
    host.add_argument("--insecure", action="store_true", help="no encryption, no authentication (trusted networks)")
    _add_limits(host)
    policy = host.add_argument_group(
        "what agents may run (an agent key is a right to these envs, never to the host)",
        "PATTERNS are comma-separated globs; everything else an agent asks for is refused, naming the flag",
    )
    policy.add_argument(
        "--runtimes",
        default="process,docker",
        help="runtimes agents may ask for: process, docker, venv, micromamba (default %(default)s)",
    )
    policy.add_argument(
        "--envs",
        metavar="PATTERNS",
        help="env ids agents may make, e.g. 'ALE/*,CartPole-v1' (default: every id registered here once --plugins "
        "are imported; give patterns for ids only an image registers)",
    )
    policy.add_argument(
        "--plugins",
        metavar="MODULES",
        help="modules imported to fill this host's gymnasium registry (default: ale_py, vizdoom, minigrid, ... "
        "where installed)",
    )
    policy.add_argument(
        "--entry-points",
        metavar="PATTERNS",
        help="module:callable entry points agents may name; '*' stays within one dotted part "
        "(default: the presets, portal_shm.presets:atari,atari_vector,vizdoom)",
    )
    policy.add_argument(
        "--images",
        metavar="PATTERNS",
        help="docker images agents may run (default: images with the portal-shm.env-image label, which "
        "portal-shm build sets); hosts never pull",
    )
    policy.add_argument("--max-mem", default="4g", help="cap of a container's mem_limit, and its default (%(default)s)")
    policy.add_argument(
        "--max-cpus",
        type=positive_float,
        default=None,
        help="cap of a container's cpus, and its default (default: the cores)",
    )
    policy.add_argument(
        "--max-pids", type=positive_int, default=1024, help="cap of a container's pids_limit (default %(default)s)"
    )
    policy.add_argument(
        "--python",
        action="append",
        metavar="NAME=PATH",
        help="an interpreter agents may pick by name (python='NAME') for the process and venv runtimes; repeatable",
    )
    policy.add_argument(
        "--venv",
        action="append",
        metavar="NAME=REQS",
        help="a venv agents may pick by name (venv='NAME'): 'REQ REQ ...' or @requirements.txt; repeatable",
    )
    policy.add_argument(
        "--micromamba",
        action="append",
        metavar="NAME=SPEC",
        help="a micromamba env agents may pick by name (micromamba='NAME'), from its spec .yml; repeatable",
    )
    policy.add_argument(
        "--agent-installs",
        action="store_true",
        help="let agents name packages for venvs (requirements=[...]): installing a package runs its code on this "
        "host, so this gives every agent key the right to run code here",
    )
    policy.add_argument(
        "--pickled-states",
        action="store_true",
        help="let agents save and restore env states that the env runtime pickles (get_state(allow_pickle=True)): "
        "unpickling runs code, so this gives every agent key the right to run code in the env runtimes",
    )
    policy.add_argument(
        "--env-kwargs",
        metavar="NAMES",
        help="env kwarg names allowed beside those the env's constructor declares (globs)",
    )
    policy.add_argument(
        "--size-cap",
        action="append",
        metavar="NAME=N",
        help="the largest value agents may give an env kwarg that sizes memory (default: stack 64, screen_size "
        "1024, frame_skip 64, noop_max 1000, ...; see SECURITY.md); repeatable",
    )
    policy.add_argument(
        "--max-ring-bytes",
        default="1g",
        help="the largest ring a session's envs may declare spaces for, checked before it is made (default %(default)s)",
    )
    policy.add_argument(
        "--calls",
        metavar="PATTERNS",
        help="names agents may call, get or set on envs (default '*': every public name; never '_' names)",
    )
    host.add_argument(
        "--heartbeat-timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds of silence before an agent's envs are freed (default %(default)s)",
    )
    host.add_argument(
        "--step-timeout",
        type=positive_seconds,
        default=DEFAULT_STEP_TIMEOUT,
        metavar="SECONDS",
        help="the longest a step, reset or call of an agent's envs may take: past it the env is wedged and its "
        "session ends; agents may ask for less (default %(default)s)",
    )
    host.set_defaults(func=cmd_host)

    keys = commands.add_parser(
        "keys",
        help="CURVE key pairs of agents and hosts",
        description="Make and show the CURVE key pairs with which agents and env hosts know each other: an agent "
        "gives its public key to each host (into the host's clients directory) and pins the host's.",
    )
    verbs = keys.add_subparsers(dest="keys_command", required=True)
    create = verbs.add_parser(
        "create",
        help="make NAME.key and NAME.key_secret (0600)",
        description="Make a key pair: NAME.key, the public key to give the other side, and NAME.key_secret "
        "(mode 600), which stays on this machine.",
    )
    create.add_argument(
        "name",
        nargs="?",
        default=None,
        help="file name of the pair (default USER@HOSTNAME, so agents' keys never overwrite each other on a host)",
    )
    create.add_argument("--dir", default=None, help="where (default ~/.config/portal-shm/keys)")
    create.set_defaults(func=cmd_keys_create)
    show = verbs.add_parser(
        "show",
        help="print a key file's public key",
        description="Print the public key of a key file (.key or .key_secret), e.g. to pin a host's key.",
    )
    show.add_argument(
        "key",
        nargs="?",
        default=None,
        help="a .key/.key_secret path, or a name in ~/.config/portal-shm/keys (default: this machine's USER@HOSTNAME)",
    )
    show.set_defaults(func=cmd_keys_show)
