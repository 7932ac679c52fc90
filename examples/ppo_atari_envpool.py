"""PPO on Atari written against envpool's API, run through ``portal_shm.envpool``.

The script is what an envpool user already has: ``envpool.make(task, env_type="gym", ...)`` with
episodic life and clipped rewards, ``reset()`` returning observations, ``step`` returning
``(obs, reward, done, info)``, ``envs.action_space`` being one env's space. The only change is the
import line; the games then run in portal-shm env servers (local processes by default,
``--backend docker`` for the ``portal-shm/ale`` image) with the preprocessing inside them.

    python examples/ppo_atari_envpool.py --env-id Breakout-v5 --total-timesteps 10000000

Returns are the games' scores: with episodic life an "episode" of the learner is one life, so the
script adds up ``info["reward"]`` (the unclipped reward) and logs a return when the game is over
(``info["lives"] == 0``), or cut by the time limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import portal_shm.envpool as envpool  # was: import envpool
from portal_shm.errors import DockerUnavailableError


@dataclasses.dataclass
class Args:
    """Command-line options, e.g. ``--num-envs 16``; booleans take true/false."""

    env_id: str = "Breakout-v5"
    backend: str = "process"  # "docker": envs in containers of --image
    image: str = "portal-shm/ale"
    num_envs: int = 8
    total_timesteps: int = 10_000_000
    rollout_steps: int = 128
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 4
    epochs: int = 4
    clip_coef: float = 0.1
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 1
    device: str = "auto"  # "cpu", "cuda", or auto: cuda when available
    torch_threads: int = 1  # more steal the cores the env servers need (0: torch's default)
    tensorboard: str = "runs"  # log directory when tensorboard is installed; "" turns it off


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for field in dataclasses.fields(Args):
        kind = field.type if isinstance(field.type, type) else eval(field.type)
        parse = (lambda text: text.lower() in ("1", "true", "yes")) if kind is bool else kind
        parser.add_argument("--" + field.name.replace("_", "-"), type=parse, default=field.default)
    return Args(**vars(parser.parse_args()))


def layer(module: nn.Module, std: float = np.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class Agent(nn.Module):
    """Nature-DQN convolutions and 512 units shared by the policy and value heads."""

    def __init__(self, channels: int, num_actions: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            layer(nn.Conv2d(channels, 32, 8, stride=4)),
            nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.policy = layer(nn.Linear(512, num_actions), std=0.01)
        self.value_head = layer(nn.Linear(512, 1), std=1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.trunk(obs / 255.0)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> tuple:
        hidden = self.trunk(obs / 255.0)
        dist = Categorical(logits=self.policy(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value_head(hidden).squeeze(-1)


class GameScores:
    """Games' scores under episodic life: the unclipped rewards summed until the game is over."""

    def __init__(self, num_envs: int) -> None:
        self.running = np.zeros(num_envs)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.finished: list = []

    def update(self, done: np.ndarray, info: dict) -> list:
        self.running += info["reward"]
        self.length += 1
        over = done & ((info["lives"] == 0) | info["TimeLimit.truncated"])
        ended = [(float(self.running[i]), int(self.length[i])) for i in np.flatnonzero(over)]
        self.running[over], self.length[over] = 0.0, 0
        self.finished.extend(ended)
        return ended


def make_envs(args: Args) -> envpool.EnvPool:
    """envpool's ``make``, as the script had it, plus where the games run."""
    backend = {"backend": args.backend, **({"image": args.image} if args.backend == "docker" else {})}
    try:
        return envpool.make(
            args.env_id,
            env_type="gym",
            num_envs=args.num_envs,
            episodic_life=True,
            reward_clip=True,
            seed=args.seed,
            **backend,
        )
    except DockerUnavailableError as exc:  # no docker SDK, or no engine to reach: one line, no traceback
        reason = " ".join(str(exc).split())
        print(
            f"{os.path.basename(__file__)}: no Docker: run the envs as local processes with --backend process "
            f"(needs pip install 'portal-shm[atari]'). Docker: {reason}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def main() -> None:
    args = parse_args()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    envs = make_envs(args)
    # (scripts for envpool 0.x set num_envs and single_*_space here; envpool 1.x has them, as does the drop-in)
    assert envs.single_action_space.n > 1, "only discrete action spaces"
    writer = None
    if args.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(f"{args.tensorboard}/ppo_envpool_{args.env_id}_{args.seed}_{int(time.time())}")
        except ImportError:
            print("tensorboard is not installed: logging to stdout only")
    try:
        train(args, envs, device, writer)
    finally:
        envs.close()
        if writer is not None:
            writer.close()


def train(args: Args, envs, device: torch.device, writer) -> None:
    n, steps = args.num_envs, args.rollout_steps
    obs_shape = envs.single_observation_space.shape
    agent = Agent(obs_shape[0], int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((steps, n) + obs_shape, device=device)
    actions = torch.zeros((steps, n), dtype=torch.long, device=device)
    logprobs, rewards, dones, values = (torch.zeros((steps, n), device=device) for _ in range(4))

    scores = GameScores(n)
    next_obs = torch.Tensor(envs.reset()).to(device)
    next_done = torch.zeros(n, device=device)
    updates = max(1, args.total_timesteps // (n * steps))
    global_step, started = 0, time.time()
    for update in range(1, updates + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (update - 1) / updates)
        for t in range(steps):
            global_step += n
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            actions[t], logprobs[t], values[t] = action, logprob, value
            raw_obs, reward, done, info = envs.step(action.cpu().numpy())
            rewards[t] = torch.tensor(reward, device=device)
            next_obs, next_done = torch.Tensor(raw_obs).to(device), torch.Tensor(done).to(device)
            for score, length in scores.update(done, info):
                print(f"global_step={global_step}, episodic_return={score}", flush=True)
                if writer is not None:
                    writer.add_scalar("charts/episodic_return", score, global_step)
                    writer.add_scalar("charts/episodic_length", length, global_step)

        with torch.no_grad():  # generalised advantage estimation
            next_value = agent.value(next_obs)
            advantages = torch.zeros_like(rewards)
            running = torch.zeros(n, device=device)
            for t in reversed(range(steps)):
                following = (next_value, next_done) if t == steps - 1 else (values[t + 1], dones[t + 1])
                alive = 1.0 - following[1]
                delta = rewards[t] + args.gamma * following[0] * alive - values[t]
                running = delta + args.gamma * args.gae_lambda * alive * running
                advantages[t] = running
            returns = advantages + values

        batch = steps * n
        b_obs, b_actions = obs.reshape((batch,) + obs_shape), actions.reshape(batch)
        b_logprobs, b_advantages = logprobs.reshape(batch), advantages.reshape(batch)
        b_returns, b_values = returns.reshape(batch), values.reshape(batch)
        minibatch = batch // args.minibatches
        for _ in range(args.epochs):
            order = torch.randperm(batch, device=device)
            for begin in range(0, batch, minibatch):
                idx = order[begin : begin + minibatch]
                _, new_logprob, entropy, new_value = agent.act(b_obs[idx], b_actions[idx])
                ratio = (new_logprob - b_logprobs[idx]).exp()
                adv = b_advantages[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                clipped = b_values[idx] + (new_value - b_values[idx]).clamp(-args.clip_coef, args.clip_coef)
                value_loss = 0.5 * torch.max((new_value - b_returns[idx]) ** 2, (clipped - b_returns[idx]) ** 2).mean()
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        sps = int(global_step / (time.time() - started))
        print(f"update {update}/{updates} global_step={global_step} SPS={sps} games={len(scores.finished)}", flush=True)
        if writer is not None:
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("losses/value_loss", value_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", policy_loss.item(), global_step)
    recent = [score for score, _ in scores.finished[-20:]]
    print(
        f"done: {global_step} env steps, SPS {int(global_step / (time.time() - started))}, "
        f"{len(scores.finished)} games, mean return of the last {len(recent)}: {np.mean(recent) if recent else float('nan'):.1f}"
    )


if __name__ == "__main__":
    main()
