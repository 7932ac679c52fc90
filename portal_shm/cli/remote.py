"""``portal-shm host`` (serve envs to agents on other machines) and ``portal-shm keys`` (CURVE key pairs)."""

from __future__ import annotations

import argparse
import logging
import os

from rich.console import Console

console = Console()


def cmd_host(args: argparse.Namespace) -> int:
    """Run the env host daemon until Ctrl-C or SIGTERM."""
    from ..remote.host import HostOptions, run_host

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    options = HostOptions(
        bind=args.bind,
        keys_dir=args.keys,
        clients_dir=args.clients,
        insecure=args.insecure,
        max_envs=args.max_envs,
        max_envs_per_agent=args.max_envs_per_agent,
        runtimes=tuple(r.strip() for r in args.runtimes.split(",") if r.strip()),
        heartbeat_timeout=args.heartbeat_timeout,
    )
    if args.insecure:
        console.print(
            "[bold red]warning:[/] --insecure: env traffic is plain text and anyone who reaches "
            f"{args.bind} can start envs (run code) here"
        )
    run_host(options)
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    """A new key pair: NAME.key (public, give it to the other side) and NAME.key_secret (0600)."""
    from ..remote.keys import create_key_pair, default_keys_dir, public_key

    directory = args.dir or default_keys_dir()
    public_path, secret_path = create_key_pair(directory, args.name)
    console.print(f"public key {public_key(public_path, 'keys').decode()} in {public_path}", highlight=False)
    console.print(f"secret key in {secret_path} (mode 600: keep it on this machine)", highlight=False)
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    """Print the public key of a key file (a .key or .key_secret path, or a name in the keys directory)."""
    from ..remote.keys import default_keys_dir, public_key

    path = args.key if os.path.exists(args.key) else os.path.join(default_keys_dir(), args.key + ".key")
    console.print(public_key(path, "keys").decode(), highlight=False)
    return 0


def add_remote_commands(commands: argparse._SubParsersAction) -> None:
    host = commands.add_parser("host", help="serve envs to agents on other machines (one port, CURVE by default)")
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
    host.add_argument("--max-envs", type=int, default=1024, help="envs of all agents together (default %(default)s)")
    host.add_argument("--max-envs-per-agent", type=int, default=512, help="envs per agent key (default %(default)s)")
    host.add_argument(
        "--runtimes",
        default="process,docker",
        help="runtimes agents may ask for: process, docker, venv, micromamba (default %(default)s)",
    )
    host.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=10.0,
        help="seconds of silence before an agent's envs are freed (default %(default)s)",
    )
    host.set_defaults(func=cmd_host)

    keys = commands.add_parser("keys", help="CURVE key pairs of agents and hosts")
    verbs = keys.add_subparsers(dest="keys_command", required=True)
    create = verbs.add_parser("create", help="make NAME.key and NAME.key_secret (0600)")
    create.add_argument("name", nargs="?", default="agent")
    create.add_argument("--dir", default=None, help="where (default ~/.config/portal-shm/keys)")
    create.set_defaults(func=cmd_keys_create)
    show = verbs.add_parser("show", help="print a key file's public key")
    show.add_argument("key", help="a .key/.key_secret path, or a name in ~/.config/portal-shm/keys")
    show.set_defaults(func=cmd_keys_show)
