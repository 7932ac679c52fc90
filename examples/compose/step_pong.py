"""Step Pong in N envs with seeded actions and print what came back as one JSON line.

The agent command of this directory's docker-compose.yml and of ``portal-shm agent``: the same
run on the host and in a container must print the same ``digest`` (a hash of every observation,
reward and done flag), which is how the tests compare them; ``env_steps_per_s`` is what
benchmarks/agent_in_container.py compares.

    python examples/compose/step_pong.py --backend docker --num-envs 8 --steps 200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import numpy as np

import portal_shm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="docker", help="process or docker (or remote, with --kwarg)")
    parser.add_argument("--image", default="portal-shm/ale", help="the docker backend's env image")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-digest", action="store_true", help="skip hashing (for throughput)")
    parser.add_argument("--exit-code", type=int, default=0, help="exit with this code (to test exit codes)")
    args = parser.parse_args()

    kwargs = {"image": args.image} if args.backend == "docker" else {}
    envs = portal_shm.make_vec("ALE/Pong-v5", args.num_envs, backend=args.backend, **kwargs)
    try:
        actions = np.random.default_rng(args.seed).integers(0, envs.single_action_space.n, (args.steps, args.num_envs))
        digest = hashlib.sha256()
        obs, _ = envs.reset(seed=args.seed)
        digest.update(obs.tobytes())
        started = time.perf_counter()
        for step in range(args.steps):
            obs, reward, terminated, truncated, _ = envs.step(actions[step])
            if not args.no_digest:
                for array in (obs, reward, terminated, truncated):
                    digest.update(np.ascontiguousarray(array).tobytes())
        elapsed = time.perf_counter() - started
        runtimes = sorted({server["runtime"].split(" ")[0] for server in envs.servers})
    finally:
        envs.close()
    print(
        json.dumps(
            {
                "digest": None if args.no_digest else digest.hexdigest(),
                "env_steps_per_s": args.steps * args.num_envs / elapsed,
                "runtimes": runtimes,
                "run_dir_base": os.environ.get("PORTAL_SHM_RUN_DIR", ""),
            }
        ),
        flush=True,
    )
    raise SystemExit(args.exit_code)


if __name__ == "__main__":
    main()
