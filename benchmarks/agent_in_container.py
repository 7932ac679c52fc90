"""The agent on the host vs in a container: Pong at N=8 on the docker backend, the same
``examples/compose/step_pong.py`` run by ``python`` here and by ``portal-shm agent IMAGE`` in a
container, in interleaved rounds (the order alternates each round) so that drift hits both alike.
Each figure is the stepping loop's env-steps/s (start-up excluded); the ratio is taken round by
round (container / host) and its median printed. Target: within 5 % (ratio >= 0.95).

    portal-shm build agent && portal-shm build ale
    python benchmarks/agent_in_container.py --rounds 5 --steps 1500
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_PONG = "examples/compose/step_pong.py"


def measure(where: str, args: argparse.Namespace) -> float:
    """env-steps/s of one run, ``where`` is "host" or "container"."""
    run = [STEP_PONG, "--backend", "docker", "--image", args.image, "--num-envs", str(args.num_envs)]
    run += ["--steps", str(args.steps), "--no-digest"]
    if where == "host":
        command = [sys.executable, *run]
    else:
        command = [sys.executable, "-m", "portal_shm", "agent", args.agent_image, "--", "python", *run]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["env_steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500, help="lockstep steps per run")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--image", default="portal-shm/ale", help="the env image")
    parser.add_argument("--agent-image", default="portal-shm/agent")
    parser.add_argument("--write", default=None, help="also write the report to this file")
    args = parser.parse_args()

    rates: dict = {"host": [], "container": []}
    ratios = []
    for round_index in range(args.rounds):
        order = ("host", "container") if round_index % 2 == 0 else ("container", "host")
        for where in order:
            rates[where].append(measure(where, args))
        ratios.append(rates["container"][-1] / rates["host"][-1])
        print(
            f"round {round_index}: host {rates['host'][-1]:,.0f}  container {rates['container'][-1]:,.0f} "
            f"env-steps/s  ratio {ratios[-1]:.3f}",
            flush=True,
        )
    median = statistics.median(ratios)
    lines = [
        f"# agent on the host vs in a container, {datetime.date.today()}, {platform.node()} ({os.cpu_count()} cores)",
        f"# python benchmarks/agent_in_container.py --rounds {args.rounds} --steps {args.steps} "
        f"--num-envs {args.num_envs}",
        f"Pong N={args.num_envs}, docker backend, env-steps/s (median of {args.rounds} rounds):",
        f"  host       {statistics.median(rates['host']):,.0f}",
        f"  container  {statistics.median(rates['container']):,.0f}",
        f"  container / host, median of per-round ratios: {median:.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); target >= 0.95: {'ok' if median >= 0.95 else 'MISSED'}",
    ]
    print("\n".join(lines))
    if args.write:
        with open(args.write, "w") as file:
            file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
