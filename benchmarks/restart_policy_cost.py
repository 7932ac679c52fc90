"""What ``on_env_failure="restart"`` costs a portal that never fails, side by side with ``"raise"``.

    python benchmarks/restart_policy_cost.py [--env CartPole-v1] [--num-envs 8] [--steps 20000] [--rounds 6]

Under the restart policy each env server takes the state of every env whose episode ends and writes
it to its file (``portal_shm/wire/end_states.py``), so that a failure in the next step is repaired
exactly; the rest of the policy is bookkeeping off the hot path. The cost scales with episode ends
per step: CartPole's random episodes (~20 steps) are the worst case, Atari's (thousands) the usual.
Rounds alternate the two policies in fresh processes; prints the medians and the median per-round
ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

ONE_RUN = """
import json, sys, time
import numpy as np
import portal_shm
env, n, steps, policy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
envs = portal_shm.make_vec(env, n, vector_kwargs={"on_env_failure": policy})
envs.reset(seed=0)
envs.action_space.seed(0)
actions = [envs.action_space.sample() for _ in range(steps // 10 + steps)]
for a in actions[: steps // 10]:
    envs.step(a)
start = time.perf_counter()
for a in actions[steps // 10 :]:
    envs.step(a)
print(json.dumps(steps * n / (time.perf_counter() - start)))
envs.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    sps: dict = {"raise": [], "restart": []}
    for _ in range(args.rounds):
        for policy in sps:
            out = subprocess.run(
                [sys.executable, "-c", ONE_RUN, args.env, str(args.num_envs), str(args.steps), policy],
                capture_output=True,
                text=True,
                check=True,
            )
            sps[policy].append(json.loads(out.stdout.strip().splitlines()[-1]))
    ratios = np.array(sps["restart"]) / np.array(sps["raise"])
    for policy, values in sps.items():
        print(f"{policy:8s} median {np.median(values):9,.0f} steps/s  rounds {[round(v) for v in values]}")
    print(f"restart / raise: median per-round ratio {np.median(ratios):.2f} ({args.env}, N={args.num_envs})")


if __name__ == "__main__":
    main()
