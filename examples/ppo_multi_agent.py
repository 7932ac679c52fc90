"""Multi-agent PPO with parameter sharing on PettingZoo envs through make_vec_ma, in one file.

Every group of agents with the same spaces (``envs.groups``) shares one policy: its ``num_envs * k``
rows are a batch of independent learners, as in SuperSuit's and PufferLib's vectorization, so
simple_spread's three agents train one network and simple_adversary's adversary and agents train
two. The envs run in their own processes, or in containers of ``portal-shm/pettingzoo`` with
``--backend docker`` (then the agent needs torch, not PettingZoo).

    pip install -e '.[train,multiagent]'
    python examples/ppo_multi_agent.py --env mpe2.simple_spread_v3:parallel_env --total-timesteps 2000000

What multi-agent adds to cleanrl's ppo.py loop:

- rows whose ``mask`` is 0 (an agent that left, or waits for its turn) take no part in the loss:
  their actions never reach the env and their reward is 0 (the dead-agent contract);
- a row's episode ends when its agent's does (``terminated | truncated`` per row); with SAME_STEP
  autoreset the row then already holds the next episode's first observation;
- a time limit (MPE's ``max_cycles``) is not the end of the agent's task: its last reward is
  bootstrapped from the value of its last observation (``final_obs`` with SAME_STEP autoreset).

Discrete actions and vector observations (an MLP): MPE, or classic games with their action masks
(masked logits). Image observations (pistonball) need a CNN in place of ``Policy``'s MLPs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from gymnasium import spaces
from torch.distributions import Categorical

import portal_shm
from portal_shm.errors import DockerUnavailableError
from portal_shm.multi_agent import MultiAgentResult


@dataclasses.dataclass
class Args:
    """Command-line options, e.g. ``--num-envs 16``; booleans take true/false."""

    env: str = "mpe2.simple_spread_v3:parallel_env"  # a PettingZoo entry point or registry id
    env_kwargs: str = '{"max_cycles": 25}'  # JSON: the env's constructor arguments
    api: str = "parallel"  # "aec" for turn-based games (classic/tictactoe-v3): one acting row per env
    backend: str = "process"  # or "docker" (the image below), "venv", "remote" ...
    image: str = "portal-shm/pettingzoo"  # the docker backend's image
    num_envs: int = 8
    total_timesteps: int = 2_000_000  # env steps (each steps every agent once)
    rollout_steps: int = 128  # steps per env between two updates
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 4
    epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 1
    torch_threads: int = 1  # more steal the cores the env servers need (0: torch's default)


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for field in dataclasses.fields(Args):
        kind = field.type if isinstance(field.type, type) else eval(field.type)
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default)
    return Args(**vars(parser.parse_args()))


def layer(module: nn.Linear, std: float = np.sqrt(2)) -> nn.Linear:
    """Orthogonal weights, zero biases: PPO's usual initialisation."""
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class Policy(nn.Module):
    """An actor and a critic (separate MLPs, as cleanrl's ppo.py) shared by every agent of one group."""

    def __init__(self, obs_size: int, num_actions: int) -> None:
        super().__init__()

        def mlp(out: int, std: float) -> nn.Sequential:
            hidden = [layer(nn.Linear(obs_size, 64)), nn.Tanh(), layer(nn.Linear(64, 64)), nn.Tanh()]
            return nn.Sequential(*hidden, layer(nn.Linear(64, out), std=std))

        self.actor, self.critic = mlp(num_actions, 0.01), mlp(1, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, legal: torch.Tensor | None = None, action: torch.Tensor | None = None) -> tuple:
        """A sampled (or the given) action, its log-probability, the entropy and the value."""
        logits = self.actor(obs)
        if legal is not None:  # the env's action mask: illegal actions get no probability
            logits = logits.masked_fill(~legal, -1e9)
        dist = Categorical(logits=logits)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(obs)


class Rollout:
    """One group's rollout storage: ``(steps, rows)`` of the group's ``num_envs * k`` agent rows."""

    def __init__(self, steps: int, rows: int, obs_size: int, num_actions: int, has_mask: bool) -> None:
        self.obs = torch.zeros((steps, rows, obs_size))
        self.legal = torch.ones((steps, rows, num_actions), dtype=torch.bool) if has_mask else None
        self.actions = torch.zeros((steps, rows), dtype=torch.long)
        self.logprobs, self.rewards, self.values = (torch.zeros((steps, rows)) for _ in range(3))
        self.starts = torch.zeros((steps, rows))  # 1 where the row's observation follows an ended episode
        self.acting = torch.zeros((steps, rows))  # the row's mask: 1 where its agent acts on that step


def as_tensor(batch_obs: np.ndarray, rows: int) -> torch.Tensor:
    """Observations as float rows (a copy out of the ring: the rollout keeps them)."""
    return torch.as_tensor(np.asarray(batch_obs, np.float32).reshape(rows, -1))


def last_obs(result: MultiAgentResult, group: str, row: int, k: int) -> np.ndarray:
    """The last observation of the agent in ``row``, whose episode ended on this call: in
    ``final_obs`` when its env ended (SAME_STEP: the row already holds the next episode's), else
    the row's own (on the call an agent leaves, its row holds its last observation)."""
    env, agent = divmod(row, k)
    ended = result.infos.get("_final_obs")
    if ended is not None and ended[env]:
        return np.asarray(result.infos["final_obs"][env][group]["obs"][agent])
    return np.asarray(result.groups[group].obs[row])


def make_envs(args: Args) -> portal_shm.MultiAgentPortal:
    try:
        return portal_shm.make_vec_ma(
            args.env,
            args.num_envs,
            api=args.api,
            backend=args.backend,
            env_kwargs=json.loads(args.env_kwargs),
            vector_kwargs={"autoreset_mode": "SameStep"},
            **({"image": args.image} if args.backend == "docker" else {}),
        )
    except DockerUnavailableError as exc:  # no docker SDK, or no engine to reach: one line, no traceback
        reason = " ".join(str(exc).split())
        print(
            f"{os.path.basename(__file__)}: no Docker: run the envs as local processes with --backend process "
            f"(needs pip install 'portal-shm[multiagent]'). Docker: {reason}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def main() -> None:
    args = parse_args()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    envs = make_envs(args)
    try:
        train(args, envs)
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        envs.close()


def train(args: Args, envs: portal_shm.MultiAgentPortal) -> None:
    n, steps = args.num_envs, args.rollout_steps
    policies, optimizers, rollouts, rows = {}, {}, {}, {}
    for name, group in envs.groups.items():
        if not isinstance(group.action_space, spaces.Discrete):
            raise SystemExit(f"group {name!r} has {group.action_space} actions: this example trains Discrete ones")
        obs_size, num_actions = int(np.prod(group.observation_space.shape)), int(group.action_space.n)
        rows[name] = n * group.size
        policies[name] = Policy(obs_size, num_actions)
        optimizers[name] = torch.optim.Adam(policies[name].parameters(), lr=args.learning_rate, eps=1e-5)
        rollouts[name] = Rollout(steps, rows[name], obs_size, num_actions, group.has_action_mask)
        print(
            f"group {name!r}: {group.size} agents x {n} envs = {rows[name]} rows, obs {obs_size}, {num_actions} actions"
        )

    result = envs.reset(seed=args.seed)
    next_start = {name: torch.zeros(rows[name]) for name in envs.groups}
    episode_return = {name: np.zeros(rows[name]) for name in envs.groups}
    recent = {name: deque(maxlen=100) for name in envs.groups}
    updates = max(1, args.total_timesteps // (steps * n))
    global_step, started = 0, time.perf_counter()

    for update in range(1, updates + 1):
        # -- collect a rollout: every env steps `steps` times, every group acts on its rows -------
        for t in range(steps):
            global_step += n
            actions = {}
            for name, batch in result.groups.items():
                store, policy = rollouts[name], policies[name]
                store.obs[t] = as_tensor(batch.obs, rows[name])
                store.acting[t] = torch.as_tensor(batch.mask, dtype=torch.float32)
                store.starts[t] = next_start[name]
                legal = None
                if store.legal is not None:
                    store.legal[t] = (
                        torch.as_tensor(np.asarray(batch.action_mask, bool)) | ~torch.as_tensor(batch.mask)[:, None]
                    )
                    legal = store.legal[t]
                with torch.no_grad():
                    action, logprob, _, value = policy.act(store.obs[t], legal)
                store.actions[t], store.logprobs[t], store.values[t] = action, logprob, value
                actions[name] = action.numpy()  # masked rows' actions are never passed to the env

            result = envs.step(actions)
            for name, batch in result.groups.items():
                done = batch.terminated | batch.truncated  # this row's agent ended its episode
                reward = batch.reward.astype(np.float32)
                # A time limit cut the episode short: bootstrap it from the agent's last observation.
                cut = np.flatnonzero(batch.truncated & ~batch.terminated)
                if cut.size:
                    final = as_tensor(
                        np.stack([last_obs(result, name, row, envs.groups[name].size) for row in cut]), cut.size
                    )
                    with torch.no_grad():
                        reward[cut] += args.gamma * policies[name].value(final).numpy()
                rollouts[name].rewards[t] = torch.as_tensor(reward)
                next_start[name] = torch.as_tensor(done, dtype=torch.float32)
                episode_return[name] += batch.reward
                for row in np.flatnonzero(done):
                    recent[name].append(episode_return[name][row])
                    episode_return[name][row] = 0.0

        # -- per group: advantages, then clipped policy-gradient updates on the acting rows ------
        for name, batch in result.groups.items():
            store, policy = rollouts[name], policies[name]
            with torch.no_grad():
                next_value = policy.value(as_tensor(batch.obs, rows[name]))
                advantages = torch.zeros_like(store.rewards)
                running = torch.zeros(rows[name])
                for t in reversed(range(steps)):
                    following_value, following_start = (
                        (next_value, next_start[name]) if t == steps - 1 else (store.values[t + 1], store.starts[t + 1])
                    )
                    alive = 1.0 - following_start  # 0 when the row's episode ended at step t
                    delta = store.rewards[t] + args.gamma * following_value * alive - store.values[t]
                    running = delta + args.gamma * args.gae_lambda * alive * running
                    advantages[t] = running
                returns = advantages + store.values
            acting = store.acting.reshape(-1).bool()  # rows whose agent did not act carry no signal
            flat = {
                "obs": store.obs.reshape(-1, store.obs.shape[-1])[acting],
                "actions": store.actions.reshape(-1)[acting],
                "logprobs": store.logprobs.reshape(-1)[acting],
                "advantages": advantages.reshape(-1)[acting],
                "returns": returns.reshape(-1)[acting],
                "legal": None if store.legal is None else store.legal.reshape(-1, store.legal.shape[-1])[acting],
            }
            size = len(flat["actions"])
            minibatch = max(1, size // args.minibatches)
            for _ in range(args.epochs):
                order = torch.randperm(size)
                for begin in range(0, size, minibatch):
                    idx = order[begin : begin + minibatch]
                    legal = None if flat["legal"] is None else flat["legal"][idx]
                    _, new_logprob, entropy, new_value = policy.act(flat["obs"][idx], legal, flat["actions"][idx])
                    ratio = (new_logprob - flat["logprobs"][idx]).exp()
                    adv = flat["advantages"][idx]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(idx) > 1 else adv
                    clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                    policy_loss = torch.max(-adv * ratio, -adv * clipped).mean()
                    value_loss = 0.5 * ((new_value - flat["returns"][idx]) ** 2).mean()
                    loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                    optimizers[name].zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                    optimizers[name].step()

        sps = global_step / (time.perf_counter() - started)
        returns_text = "  ".join(
            f"{name} return {np.mean(recent[name]) if recent[name] else float('nan'):.1f}" for name in envs.groups
        )
        print(f"update {update}/{updates}  step {global_step}  SPS {sps:.0f}  {returns_text}", flush=True)

    elapsed = time.perf_counter() - started
    agent_steps = global_step * sum(group.size for group in envs.groups.values())
    print(
        f"done: {global_step} env steps ({agent_steps} agent steps) in {elapsed:.0f} s, SPS {global_step / elapsed:.0f}"
    )


if __name__ == "__main__":
    main()
