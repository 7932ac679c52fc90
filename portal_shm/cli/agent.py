"""``portal-shm agent IMAGE -- COMMAND``: a training command in a container that steps env
containers beside it (``portal_shm.runtimes.agent_run`` says what the container gets)."""

from __future__ import annotations

import argparse
from typing import Any

from .parser import UsageError


def cmd_agent(args: argparse.Namespace) -> int:
    from ..runtimes.agent_run import run_agent

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("name the command to run after --, e.g. portal-shm agent IMAGE -- python train.py")
    return run_agent(
        args.image,
        command,
        gpus=args.gpus,
        env=args.env,
        user=args.user,
        volumes=args.volume,
        mount_cwd=not args.no_workspace,
        name=args.name,
        network=args.network,
    )


def add_agent_command(commands: Any) -> None:
    agent = commands.add_parser(
        "agent",
        help="run a training command in a container that starts env containers beside it",
        description="Run COMMAND in a container of IMAGE with the Docker socket, a run directory shared with the "
        "host (the ring reaches env containers zero-copy), the caller's uid and the socket's group, and the "
        "current directory at /workspace. Returns COMMAND's exit code; Ctrl-C or SIGTERM stop it, and the agent's "
        "container and env containers are removed however it ends.",
        epilog="example: portal-shm agent portal-shm/agent -- python examples/compose/step_pong.py --backend docker",
    )
    agent.add_argument("--gpus", default=None, help="GPUs for the agent, as docker run --gpus: all, N or device=0,1")
    agent.add_argument(
        "-e", "--env", action="append", default=[], metavar="KEY[=VALUE]", help="environment variable; repeatable"
    )
    agent.add_argument(
        "-v", "--volume", action="append", default=[], metavar="HOST:CONTAINER[:ro]", help="extra bind; repeatable"
    )
    agent.add_argument("--user", default=None, help="UID[:GID] (default: yours; 1000:1000 when you are root)")
    agent.add_argument("--name", default=None, help="the agent container's name (default: psm-agent-RANDOM)")
    agent.add_argument("--network", default=None, help="docker's network for the agent, e.g. host (default: bridge)")
    agent.add_argument("--no-workspace", action="store_true", help="do not mount the current directory at /workspace")
    agent.add_argument("image", help="the agent's image, e.g. portal-shm/agent (portal-shm build agent)")
    agent.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    agent.set_defaults(func=cmd_agent)
