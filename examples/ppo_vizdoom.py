"""PPO on ViZDoom through a VectorPortal, in one file.

The envs run in containers of the ``portal-shm/vizdoom`` image (or local processes with
``--backend process``). The screen is shrunk to 60x80 grayscale, each action repeated for 4 tics
and 4 frames stacked inside the env's runtime (``portal_shm.presets:vizdoom``), so every step
moves 19 KB per env through the shared-memory ring instead of a 230 KB RGB frame.

    pip install -e '.[train,vizdoom]' && python examples/ppo_vizdoom.py --backend process   # no Docker
    pip install -e '.[train,docker]' && portal-shm build vizdoom
    python examples/ppo_vizdoom.py --total-timesteps 200000 --save-curve runs/vizdoom_basic

Observations reach torch without a copy (``copy=False``: views of the ring instead of the
default's fresh arrays): ``torch.from_numpy`` of the ring view shares its memory,
and the only copy is the one into the rollout buffer (on the GPU when there is one). A ring view
stays valid for ``ring_depth - 1`` (3) further steps, and this loop copies it before the next step.
Lockstep stepping: every env steps once per policy step (SAME_STEP autoreset: a finished episode's
env returns the first observation of its next episode in the same step).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import portal_shm
from portal_shm.errors import DockerUnavailableError


@dataclasses.dataclass
class Args:
    """Command-line options, e.g. ``--num-envs 16``; booleans take true/false."""

    env_id: str = "VizdoomBasic-v1"
    backend: str = "docker"  # "process": envs in local processes (needs `pip install vizdoom`)
    image: str = "portal-shm/vizdoom"  # the docker backend's image
    num_envs: int = 8
    total_timesteps: int = 200_000
    rollout_steps: int = 64  # steps per env between two updates
    learning_rate: float = 5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 4
    epochs: int = 4
    clip_coef: float = 0.1
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 0.01  # ViZDoom basic pays -4..+100 per step: keep value targets near 1
    frame_skip: int = 4
    stack: int = 4
    seed: int = 1
    device: str = "auto"  # "cpu", "cuda", or auto: cuda when available
    torch_threads: int = 1  # intra-op threads; more steal the cores the env servers need (0: torch's default)
    save_curve: str = ""  # PREFIX: episode returns to PREFIX.csv, and PREFIX.png with matplotlib
    tensorboard: str = "runs"  # log directory when tensorboard is installed; "" turns it off


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for field in dataclasses.fields(Args):
        kind = field.type if isinstance(field.type, type) else eval(field.type)
        parse = (lambda text: text.lower() in ("1", "true", "yes")) if kind is bool else kind
        parser.add_argument("--" + field.name.replace("_", "-"), type=parse, default=field.default)
    return Args(**vars(parser.parse_args()))


def layer(module: nn.Module, std: float = np.sqrt(2)) -> nn.Module:
    """Orthogonal weights, zero biases: PPO's usual initialisation."""
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class Agent(nn.Module):
    """A small CNN shared by the policy and the value head; inputs are uint8 frame stacks.

    Half the channels of the usual Atari network: ViZDoom basic needs little, and on a CPU the
    updates, not the envs, set the pace.
    """

    def __init__(self, obs_shape: tuple, num_actions: int) -> None:
        super().__init__()
        channels = int(np.prod(obs_shape[:-2]))  # (stack, h, w) or (stack, 3, h, w)
        self.trunk = nn.Sequential(
            layer(nn.Conv2d(channels, 16, 8, stride=4)),
            nn.ReLU(),
            layer(nn.Conv2d(16, 32, 4, stride=2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            size = self.trunk(torch.zeros(1, channels, *obs_shape[-2:])).shape[1]
        self.trunk.append(layer(nn.Linear(size, 256)))
        self.trunk.append(nn.ReLU())
        self.policy = layer(nn.Linear(256, num_actions), std=0.01)
        self.value_head = layer(nn.Linear(256, 1), std=1.0)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        frames = obs.reshape(obs.shape[0], -1, *obs.shape[-2:])
        return self.trunk(frames.float() / 255.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.features(obs)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> tuple:
        """A sampled (or the given) action, its log-probability, the entropy and the value."""
        hidden = self.features(obs)
        dist = Categorical(logits=self.policy(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value_head(hidden).squeeze(-1)


class Curve:
    """Finished episodes: printed means, TensorBoard scalars, and a CSV/PNG at the end."""

    def __init__(self, args: Args) -> None:
        self.rows: list = []
        self.recent: deque = deque(maxlen=20)
        self.sps = 0.0
        self.writer = None
        if args.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(
                    f"{args.tensorboard}/ppo_{args.env_id.replace('/', '_')}_{args.seed}_{int(time.time())}"
                )
            except ImportError:
                print("tensorboard is not installed: logging to stdout only (pip install tensorboard)")

    def episode(self, step: int, seconds: float, episode_return: float, length: int) -> None:
        self.rows.append((step, round(seconds, 2), episode_return, length))
        self.recent.append(episode_return)
        if self.writer is not None:
            self.writer.add_scalar("charts/episodic_return", episode_return, step)
            self.writer.add_scalar("charts/episodic_length", length, step)

    def scalar(self, name: str, value: float, step: int) -> None:
        if self.writer is not None:
            self.writer.add_scalar(name, value, step)

    def mean(self) -> float:
        return float(np.mean(self.recent)) if self.recent else float("nan")

    def recent_return(self) -> str:
        """The log's return: the mean of the last episodes, or "-" until the first one has ended."""
        return f"(last {len(self.recent)}) {self.mean():.1f}" if self.recent else "- (no episode ended yet)"

    def save(self, prefix: str, title: str) -> None:
        os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
        with open(prefix + ".csv", "w", newline="") as file:
            out = csv.writer(file)
            out.writerow(["global_step", "seconds", "episodic_return", "episodic_length"])
            out.writerows(self.rows)
        if not self.rows:
            print(f"wrote {prefix}.csv (no episode has ended yet: no plot)")
            return
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"wrote {prefix}.csv (matplotlib is not installed: no plot)")
            return
        steps = np.array([row[0] for row in self.rows])
        returns = np.array([row[2] for row in self.rows])
        window = max(1, min(50, len(returns) // 10))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.scatter(steps, returns, s=3, alpha=0.25, label="episodes")
        ax.plot(steps[window - 1 :], smooth, color="C1", label=f"mean of {window}")
        ax.set_xlabel("env steps")
        ax.set_ylabel("episodic return")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(prefix + ".png", dpi=120)
        print(f"wrote {prefix}.csv and {prefix}.png")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def make_envs(args: Args) -> portal_shm.VectorPortal:
    backend_options = {"image": args.image} if args.backend == "docker" else {}
    try:
        return _make_vec(args, backend_options)
    except DockerUnavailableError as exc:  # no docker SDK, or no engine to reach: one line, no traceback
        reason = " ".join(str(exc).split())
        print(
            f"{os.path.basename(__file__)}: no Docker: run the envs as local processes with --backend process "
            f"(needs pip install 'portal-shm[vizdoom]'). Docker: {reason}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    except portal_shm.errors.EnvNotFoundError as exc:
        if args.backend != "docker":
            raise
        raise SystemExit(
            f"{exc}\n\nThe image {args.image} predates portal_shm.presets: rebuild it from this "
            f"checkout (portal-shm build vizdoom -t {args.image})"
        ) from None


def _make_vec(args: Args, backend_options: dict) -> portal_shm.VectorPortal:
    return portal_shm.make_vec(
        "portal_shm.presets:vizdoom",
        args.num_envs,
        backend=args.backend,
        # Ring views (no copy out of the ring): the loop copies each batch into its rollout buffer
        # before the next step, well within the views' validity.
        vector_kwargs={"autoreset_mode": "SameStep", "copy": False},
        env_id=args.env_id,
        frame_skip=args.frame_skip,
        stack=args.stack,
        **backend_options,
    )


def main() -> None:
    args = parse_args()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else "cpu"
        if args.device == "auto"
        else args.device
    )
    envs = make_envs(args)
    curve = Curve(args)
    try:
        train(args, envs, curve, device)
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        envs.close()
        if args.save_curve:  # also after Ctrl-C: the curve so far
            curve.save(
                args.save_curve,
                f"PPO {args.env_id}, {args.num_envs} envs ({args.backend}), {curve.sps:.0f} env-steps/s incl. learning",
            )
        curve.close()


def train(args: Args, envs: portal_shm.VectorPortal, curve: Curve, device: torch.device) -> None:
    n, steps = args.num_envs, args.rollout_steps
    obs_shape = envs.single_observation_space.shape
    agent = Agent(obs_shape, int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    print(
        f"{args.env_id}: {n} envs on {args.backend} ({len(envs.servers)} servers), observations {obs_shape} "
        f"{envs.single_observation_space.dtype}, {envs.single_action_space.n} actions, device {device}"
    )

    # Rollout storage; observations stay uint8 (a quarter of float32's memory and transfer).
    obs = torch.zeros((steps, n) + obs_shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((steps, n), dtype=torch.long, device=device)
    logprobs, rewards, starts, values = (torch.zeros((steps, n), device=device) for _ in range(4))

    ring_obs, _ = envs.reset(seed=args.seed)
    # zero copy: shares memory with the ring slot, which the loop only reads
    next_obs = torch.from_numpy(ring_obs)
    next_start = torch.zeros(n, device=device)  # 1 where next_obs begins an episode after a done
    episode_return, episode_length = np.zeros(n), np.zeros(n, dtype=np.int64)
    batch = steps * n
    updates = max(1, args.total_timesteps // batch)
    global_step, started = 0, time.perf_counter()

    for update in range(1, updates + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (update - 1) / updates)

        # -- collect a rollout: every env steps `steps` times (lockstep) -------------------
        for t in range(steps):
            global_step += n
            obs[t].copy_(next_obs)  # the only copy: ring view -> rollout buffer (host -> device)
            starts[t] = next_start
            with torch.no_grad():
                action, logprob, _, value = agent.act(obs[t])
            actions[t], logprobs[t], values[t] = action, logprob, value

            ring_obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            done = terminated | truncated
            scaled = reward * args.reward_scale
            # An episode cut by the time limit did not end: bootstrap it from its last observation.
            cut = np.flatnonzero(truncated & ~terminated)
            if cut.size:
                final = torch.from_numpy(np.stack(infos["final_obs"][cut])).to(device)
                with torch.no_grad():
                    scaled[cut] += args.gamma * agent.value(final).cpu().numpy()
            rewards[t] = torch.as_tensor(scaled, dtype=torch.float32, device=device)
            next_obs = torch.from_numpy(ring_obs)
            next_start = torch.as_tensor(done, dtype=torch.float32, device=device)

            episode_return += reward
            episode_length += 1
            for i in np.flatnonzero(done):
                curve.episode(
                    global_step, time.perf_counter() - started, float(episode_return[i]), int(episode_length[i])
                )
                episode_return[i], episode_length[i] = 0.0, 0

        # -- generalised advantage estimates -----------------------------------------------
        with torch.no_grad():
            next_value = agent.value(next_obs.to(device))
            advantages = torch.zeros_like(rewards)
            running = torch.zeros(n, device=device)
            for t in reversed(range(steps)):
                following_value, following_start = (
                    (next_value, next_start) if t == steps - 1 else (values[t + 1], starts[t + 1])
                )
                alive = 1.0 - following_start  # 0 when the episode ended at step t
                delta = rewards[t] + args.gamma * following_value * alive - values[t]
                running = delta + args.gamma * args.gae_lambda * alive * running
                advantages[t] = running
            returns = advantages + values

        # -- clipped policy-gradient updates over shuffled minibatches ---------------------
        flat_obs, flat_actions = obs.reshape((batch,) + obs_shape), actions.reshape(batch)
        flat_logprobs, flat_advantages = logprobs.reshape(batch), advantages.reshape(batch)
        flat_returns, flat_values = returns.reshape(batch), values.reshape(batch)
        minibatch = batch // args.minibatches
        for _ in range(args.epochs):
            order = torch.randperm(batch, device=device)
            for begin in range(0, batch, minibatch):
                idx = order[begin : begin + minibatch]
                _, new_logprob, entropy, new_value = agent.act(flat_obs[idx], flat_actions[idx])
                ratio = (new_logprob - flat_logprobs[idx]).exp()
                adv = flat_advantages[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                # value loss, clipped around the rollout's values like the policy
                clipped = flat_values[idx] + (new_value - flat_values[idx]).clamp(-args.clip_coef, args.clip_coef)
                value_loss = (
                    0.5 * torch.max((new_value - flat_returns[idx]) ** 2, (clipped - flat_returns[idx]) ** 2).mean()
                )
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        elapsed = time.perf_counter() - started
        sps = curve.sps = global_step / elapsed
        curve.scalar("charts/SPS", sps, global_step)
        curve.scalar("losses/policy", policy_loss.item(), global_step)
        curve.scalar("losses/value", value_loss.item(), global_step)
        curve.scalar("losses/entropy", entropy.mean().item(), global_step)
        print(
            f"update {update}/{updates}  step {global_step}  SPS {sps:.0f}  "
            f"return {curve.recent_return()}  episodes {len(curve.rows)}  "
            f"entropy {entropy.mean().item():.2f}",
            flush=True,
        )

    elapsed = time.perf_counter() - started
    print(
        f"done: {global_step} env steps in {elapsed:.0f} s, SPS {global_step / elapsed:.0f} (including learning), "
        f"mean return {curve.recent_return()}"
    )


if __name__ == "__main__":
    main()
