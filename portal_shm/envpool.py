"""envpool's ``make`` and the API scripts written for envpool call, over portal-shm's isolated envs.

``import portal_shm.envpool as envpool`` in place of ``import envpool``: ``envpool.make("Pong-v5",
env_type="gym", num_envs=8, episodic_life=True, reward_clip=True)`` then behaves as envpool's
(spaces, ``reset``/``step``/``send``/``recv``/``async_reset``, infos and their dtypes, ``spec.config``),
while the games run in env servers of any backend (``backend="docker", image="portal-shm/ale"``,
remote hosts, Ray) with the preprocessing inside the env's runtime (``portal_shm.presets:atari``).

Why a layer of its own: envpool scripts rely on things a gymnasium ``VectorEnv`` does differently
(``action_space`` is one env's space; infos carry ``env_id``, ``lives`` and the unclipped ``reward``
as plain arrays; the gym type returns ``(obs, reward, done, info)``), and on envpool's option names.
An option is either mapped to what makes the same envs here or refused by name with the reason;
none is silently dropped, since a dropped ``episodic_life`` or ``reward_clip`` would train another
task without a word.

Tasks: envpool's Atari ids (``Pong-v5`` -> ``ALE/Pong-v5`` in the ``atari`` preset, with envpool's
defaults) and the ViZDoom scenarios that gymnasium's ViZDoom registers (``Basic-v1`` ->
``VizdoomBasic-v1`` in the ``vizdoom`` preset: RGB frames stacked as envpool's, but ViZDoom's
gymnasium action space and infos). Other envpool tasks are refused with what to use instead.

Arrays come back as fresh arrays by default, as envpool's do, since envpool scripts keep them
(rollout lists): ``vector_kwargs={"copy": False}`` returns ring views instead (valid for
``ring_depth - 1`` further calls, README "How long a returned batch stays valid").
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional, Union

import gymnasium as gym
import numpy as np

from .agent.contract import PortalVectorEnv
from .api import make_vec
from .cluster.backend import option_names as ray_option_names
from .remote.client.backend import option_names as remote_option_names
from .runtimes.backend import Backend
from .runtimes.registry import BACKENDS, backend_option_names

ENV_TYPES = ("gymnasium", "gym", "dm")

# envpool's Atari options and their defaults (envpool/atari/atari_env.h, and its make()).
ATARI_DEFAULTS: dict[str, Any] = {
    "max_episode_steps": 27000,
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}
# envpool's options of every task (the pool's own); gym_reset_return_info is the gym type's.
COMMON_DEFAULTS: dict[str, Any] = {
    "num_threads": 0,
    "max_num_players": 1,
    "thread_affinity_offset": -1,
    "gym_reset_return_info": False,
}
VIZDOOM_DEFAULTS: dict[str, Any] = {"img_height": 84, "img_width": 84, "stack_num": 4, "frame_skip": 4}
# envpool's ViZDoom options that the scenarios' own .cfg files decide in gymnasium's ViZDoom.
VIZDOOM_CFG_OPTIONS = (
    "max_episode_steps",
    "episodic_life",
    "use_combined_action",
    "force_speed",
    "lmp_save_dir",
    "weapon_duration",
    "reward_config",
    "selected_weapon_reward_config",
    "delta_button_config",
    "cfg_path",
    "wad_path",
    "vzd_path",
    "iwad_path",
    "game_args",
    "map_id",
    "use_inter_area_resize",
)
# envpool's ViZDoom task -> the id gymnasium's ViZDoom registers for the same scenario.
VIZDOOM_TASKS = {
    "Basic-v1": "VizdoomBasic-v1",
    "BasicAudio-v1": "VizdoomBasicAudio-v1",
    "BasicNotifications-v1": "VizdoomBasicNotifications-v1",
    "DeadlyCorridor-v1": "VizdoomDeadlyCorridor-v1",
    "Deathmatch-v1": "VizdoomDeathmatch-v1",
    "DefendTheCenter-v1": "VizdoomDefendCenter-v1",
    "DefendTheLine-v1": "VizdoomDefendLine-v1",
    "HealthGathering-v1": "VizdoomHealthGathering-v1",
    "HealthGatheringSupreme-v1": "VizdoomHealthGatheringSupreme-v1",
    "MyWayHome-v1": "VizdoomMyWayHome-v1",
    "PredictPosition-v1": "VizdoomPredictPosition-v1",
    "TakeCover-v1": "VizdoomTakeCover-v1",
}
VIZDOOM_UNMAPPED = frozenset(
    {
        "D1Basic",
        "D2Navigation",
        "D3Battle",
        "D4Battle2",
        "Cig",
        "MultiDuel",
        "RocketBasic",
        "SimplerBasic",
        "VizdoomCustom",
    }
)
MUJOCO_NAMES = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
)
# Why an envpool option with a value other than its default cannot be honoured here.
REFUSED_VALUES = {
    "zero_discount_on_life_loss": "it changes only the discount of env_type='dm', which gym and gymnasium do not return",
    "use_inter_area_resize": "the preset resizes by exact area averaging (INTER_AREA's footprints) only",
    "max_num_players": "portal-shm steps single-player envs",
    "thread_affinity_offset": "env servers are not pinned to cores; drop the option (taskset the agent if needed)",
}
ATARI_INFO_DTYPES = {"lives": np.int32, "reward": np.float32, "terminated": np.int32, "elapsed_step": np.int32}


@dataclasses.dataclass(frozen=True)
class Task:
    """What an envpool task id becomes here: the preset, its env id and the options' defaults."""

    task_id: str
    family: str  # "atari" or "vizdoom"
    env_id: str  # the id the preset makes inside the runtime
    defaults: dict


def task(task_id: str) -> Task:
    """The preset behind envpool's ``task_id``, or an error saying what to use for it."""
    name, _, version = task_id.rpartition("-")
    if task_id in VIZDOOM_TASKS:
        return Task(task_id, "vizdoom", VIZDOOM_TASKS[task_id], dict(VIZDOOM_DEFAULTS))
    if name in VIZDOOM_UNMAPPED:
        raise ValueError(
            f"envpool task {task_id!r} has no scenario in gymnasium's ViZDoom; mapped ViZDoom tasks: "
            f"{', '.join(VIZDOOM_TASKS)} (or portal_shm.make_vec('portal_shm.presets:vizdoom', n, env_id=...) "
            "with your own scenario)"
        )
    if name in MUJOCO_NAMES:
        raise ValueError(
            f"envpool's MuJoCo task {task_id!r} is not mapped: its options and infos are envpool's own; make "
            f"gymnasium's {task_id} with portal_shm.make_vec({task_id!r}, n) (backend='docker', "
            "image='portal-shm/mujoco' where MuJoCo is not installed)"
        )
    if version == "v5" and name.isidentifier() and name[:1].isupper():
        return Task(task_id, "atari", f"ALE/{name}-v5", dict(ATARI_DEFAULTS))
    raise ValueError(
        f"envpool task {task_id!r} is not mapped: portal_shm.envpool knows envpool's Atari ids (Pong-v5, "
        f"Breakout-v5, ...) and the ViZDoom tasks {', '.join(VIZDOOM_TASKS)}; any gymnasium id runs with "
        f"portal_shm.make_vec(id, n)"
    )


def _backend_option_names(backend: Union[str, Backend]) -> set:
    """The keyword arguments that configure ``backend`` rather than envpool's task."""
    if backend in ("remote", "ray"):
        own = remote_option_names() if backend == "remote" else ray_option_names()
        runtimes = {field.name for cls in BACKENDS.values() for field in dataclasses.fields(cls)}
        return own | runtimes
    return backend_option_names(backend)


def _preset_kwargs(spec: Task, options: dict) -> dict:
    """envpool's options of ``spec`` (defaults filled in) as the preset's keyword arguments."""
    if spec.family == "vizdoom":
        return {
            "env_id": spec.env_id,
            "size": (options["img_height"], options["img_width"]),
            "stack": options["stack_num"],
            "frame_skip": options["frame_skip"],
            "grayscale": False,  # envpool's ViZDoom frames are RGB
        }
    if options["noop_max"] < 1:
        raise ValueError(f"noop_max={options['noop_max']}: envpool draws 1 to noop_max no-ops, so noop_max >= 1")
    kwargs = {
        "env_id": spec.env_id,
        "stack": options["stack_num"],
        "frame_skip": options["frame_skip"],
        "noop_min": 1,
        "noop_max": options["noop_max"],
        "screen_size": (options["img_height"], options["img_width"]),
        "grayscale": options["gray_scale"],
        "episodic_life": options["episodic_life"],
        "reward_clip": options["reward_clip"],
        "fire_reset": options["use_fire_reset"],
        "max_episode_steps": options["max_episode_steps"],
        "repeat_action_probability": float(options["repeat_action_probability"]),
        "full_action_space": options["full_action_space"],
        "envpool_infos": True,
    }
    for key in ("mode", "difficulty"):
        if options[key] != -1:  # -1: the game's default
            kwargs[key] = options[key]
    return kwargs


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What envpool's ``env.spec`` holds that scripts read: ``config`` (a named tuple), the spaces."""

    id: str
    config: Any
    observation_space: gym.Space
    action_space: gym.Space
    reward_threshold: Optional[float] = None


class EnvPool:
    """envpool's env object over a portal: one env's spaces, envpool's calls, infos and dtypes.

    ``action_space``/``observation_space`` are one env's spaces, as envpool gives them (and so are
    ``single_*``; all four are plain attributes that scripts may overwrite). The portal itself is
    ``self.portal`` (``stats()``, ``servers``).
    """

    def __init__(
        self, portal: PortalVectorEnv, spec: Task, env_type: str, config: dict, seed: Any, reshape: Optional[tuple]
    ) -> None:
        self.portal = portal
        self.task = spec
        self.env_type = env_type
        self.config = config
        self.num_envs = int(config["num_envs"])
        self.batch_size = int(config["batch_size"])
        self.is_async = self.batch_size < self.num_envs
        self.all_env_ids = np.arange(self.num_envs, dtype=np.int32)
        self._seed = seed  # handed to the first reset, as envpool seeds env i with seed + i at creation
        self._reshape = reshape  # (channels, h, w) when RGB frames are stacked as envpool's (3 * stack, h, w)
        single_obs = portal.single_observation_space
        if reshape is not None:
            single_obs = gym.spaces.Box(0, 255, reshape, np.uint8)
        self.single_observation_space = self.observation_space = single_obs
        self.single_action_space = self.action_space = portal.single_action_space
        self.spec = EnvSpec(
            spec.task_id, collections.namedtuple("Config", list(config))(**config), single_obs, self.action_space
        )
        self._pending: Optional[str] = None  # lockstep send/recv: "step" or "reset" in flight
        self._elapsed = np.zeros(self.num_envs, np.int32)  # ViZDoom: counted here (Atari: by the preset)
        self._ended = np.zeros(self.num_envs, bool)

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.config.items())
        return f"portal_shm.envpool.EnvPool({self.task.task_id!r}, env_type={self.env_type!r}, {options})"

    # -- envpool's calls --------------------------------------------------------------------------
    def reset(self, env_id: Optional[np.ndarray] = None) -> Any:
        """Reset every env (``env_id`` must name all of them: the portal resets all at once) and return
        the first observations: ``(obs, info)``, or ``obs`` alone for ``env_type="gym"`` unless
        ``gym_reset_return_info=True``. With async batches, the first batch after an ``async_reset``."""
        self._check_all(env_id, "reset")
        if self.is_async:
            self.async_reset()
            obs, _, _, _, info = self.recv()
        else:
            obs, infos = self.portal.reset(seed=self._take_seed())
            self._ended[:] = True
            self._count_steps(self.all_env_ids, np.zeros(self.num_envs, bool))
            obs, info = self._obs(obs), self._info(infos, self.all_env_ids, None)
        if self.env_type == "gym" and not self.config["gym_reset_return_info"]:
            return obs
        return obs, info

    def step(self, action: Any, env_id: Optional[np.ndarray] = None) -> tuple:
        """``send(action, env_id)`` then ``recv()``: the next batch."""
        self.send(action, env_id)
        return self.recv()

    def send(self, action: Any, env_id: Optional[np.ndarray] = None) -> None:
        """Step the envs ``env_id`` (default: all, as envpool) with ``action`` (one per env) and return
        at once. With async batches ``env_id`` is usually the last ``recv``'s ``info["env_id"]``."""
        action = np.asarray(action)
        if not self.is_async:
            self._check_all(env_id, "send")
            if env_id is not None:  # every env, maybe in another order: put the actions in env order
                order = np.empty(self.num_envs, np.intp)
                order[np.asarray(env_id, dtype=np.intp).reshape(-1)] = np.arange(self.num_envs)
                action = action[order]
            self._begin("step")
            self.portal.step_async(action)
            return
        ids = self.all_env_ids if env_id is None else np.asarray(env_id, dtype=np.int32).reshape(-1)
        self.portal.send(action, ids)

    def recv(self, reset: bool = False, return_info: bool = True) -> tuple:
        """The next batch: ``(obs, reward, terminated, truncated, info)`` (gymnasium) or ``(obs, reward,
        done, info)`` (gym); after ``async_reset``, the reset batches in the same form."""
        if not self.is_async:
            pending, self._pending = self._pending, None
            if pending is None:
                raise RuntimeError("recv() without a send() or async_reset() before it")
            if pending == "reset":
                obs, infos = self.portal.reset_wait()
                size = self.num_envs
                reward, terminated, truncated = np.zeros(size), np.zeros(size, bool), np.zeros(size, bool)
            else:
                obs, reward, terminated, truncated, infos = self.portal.step_wait()
            ids = self.all_env_ids
        else:
            obs, reward, terminated, truncated, infos = self.portal.recv()
            ids = np.asarray(infos["env_id"], dtype=np.int32)
        self._count_steps(ids, terminated | truncated)
        info = self._info(infos, ids, truncated)
        obs, reward = self._obs(obs), np.asarray(reward, dtype=np.float32)
        if self.env_type == "gym":
            return obs, reward, terminated | truncated, info
        return obs, reward, terminated, truncated, info

    def async_reset(self) -> None:
        """Reset every env; ``recv()`` then hands out the reset observations batch by batch."""
        self._ended[:] = True  # the envs' next results are reset observations: elapsed_step 0
        if self.is_async:
            self.portal.async_reset(seed=self._take_seed())
        else:
            self._begin("reset")
            self.portal.reset_async(seed=self._take_seed())

    def close(self) -> None:
        self.portal.close()

    def seed(self, seed: Any = None) -> None:
        """Refused, as envpool ignores it: the seed is ``make``'s (env ``i`` gets ``seed + i``)."""
        raise RuntimeError("seed() does not reseed envpool envs: pass seed= to portal_shm.envpool.make(...)")

    def xla(self) -> Any:
        """Refused: envpool's XLA handle (send/recv inside ``jax.jit``) needs its C++ pool in the
        agent's own process, and these envs live in other processes."""
        raise RuntimeError(
            "xla() is not available: the envs live in env servers, not in this process, so there is no "
            "XLA custom call to step them from inside jax.jit. Step them from Python (envs.send/envs.recv "
            "or envs.step between jitted policy calls), as envpool's non-XLA loops do"
        )

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------------
    def _take_seed(self) -> Any:
        seed, self._seed = self._seed, None
        return seed

    def _begin(self, what: str) -> None:
        if self._pending is not None:
            raise RuntimeError(f"{what}: a {self._pending} is in flight; recv() it first")
        self._pending = what

    def _check_all(self, env_id: Any, what: str) -> None:
        if env_id is None:
            return
        ids = np.sort(np.asarray(env_id).reshape(-1))
        if ids.shape != (self.num_envs,) or not np.array_equal(ids, self.all_env_ids):
            mode = "" if self.is_async else " in lockstep (batch_size == num_envs)"
            raise ValueError(
                f"{what}(env_id={np.asarray(env_id).tolist()}){mode} must name every env: the portal "
                f"{'resets' if what == 'reset' else 'steps'} all {self.num_envs} at once; for some envs at a "
                "time make the pool with batch_size < num_envs and use send/recv"
            )

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        if self._reshape is None:
            return obs
        return obs.reshape((obs.shape[0],) + self._reshape)

    def _count_steps(self, ids: np.ndarray, ended: np.ndarray) -> None:
        """ViZDoom's ``elapsed_step`` (Atari's comes from the preset): 0 on the reset that follows an
        episode's end (autoreset, NextStep) or a reset, one more on every other step."""
        if self.task.family == "atari":
            return
        self._elapsed[ids] = np.where(self._ended[ids], 0, self._elapsed[ids] + 1)
        self._ended[ids] = ended

    def _info(self, infos: dict, ids: np.ndarray, truncated: Optional[np.ndarray]) -> dict:
        """envpool's info dict: ``env_id``, ``players``, then the task's keys in envpool's dtypes."""
        info: dict[str, Any] = {"env_id": ids, "players": {"env_id": ids}}
        if self.task.family == "atari":
            for key, dtype in ATARI_INFO_DTYPES.items():
                info[key] = np.asarray(infos[key], dtype=dtype) if key in infos else np.zeros(len(ids), dtype)
        else:
            for key, value in infos.items():
                if not key.startswith("_") and key != "env_id":
                    info[key] = value
            info["elapsed_step"] = self._elapsed[ids]
        if self.env_type == "gym":
            info["TimeLimit.truncated"] = np.zeros(len(ids), bool) if truncated is None else np.asarray(truncated)
        return info


def make(
    task_id: str,
    env_type: str = "gymnasium",
    num_envs: int = 1,
    batch_size: Optional[int] = None,
    seed: Union[int, list, None] = 42,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    **options: Any,
) -> EnvPool:
    """envpool's ``make``: ``num_envs`` envs of envpool's ``task_id`` in portal-shm runtimes.

    ``options`` are envpool's (``episodic_life``, ``reward_clip``, ``noop_max``, ``stack_num``, ...:
    the task's, with envpool's defaults) or the backend's (``image=`` for ``backend="docker"``,
    ``hosts=`` for ``"remote"``, ...). ``batch_size`` below ``num_envs`` gives envpool's async
    batches; ``num_threads=k`` runs ``k`` env servers (``num_envs`` a multiple of ``k``).
    ``vector_kwargs`` go to the ``VectorPortal`` (``copy`` defaults to True here, see the module
    docstring). An option that does not apply raises, naming it and what to do instead.
    """
    if env_type not in ENV_TYPES:
        raise ValueError(f"env_type={env_type!r}: envpool's env types are {', '.join(map(repr, ENV_TYPES))}")
    if env_type == "dm":
        raise ValueError(
            "env_type='dm' (dm_env TimeSteps) is not provided by portal_shm.envpool: use env_type='gymnasium' "
            "or 'gym', which give the same envs (the discount is 1 - terminated)"
        )
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    batch = num_envs if batch_size in (None, 0) else int(batch_size)
    if not 1 <= batch <= num_envs:
        raise ValueError(f"batch_size={batch_size} must lie between 1 and num_envs={num_envs}")
    spec = task(task_id)
    backend_names = _backend_option_names(backend)
    known = {**COMMON_DEFAULTS, **spec.defaults}
    env_seed = options.pop("env_seed", None)
    for key in ("base_path", "from_pixels", "render_mode"):
        if key in options:
            raise ValueError(
                f"{key}= does not apply to portal_shm.envpool: the env's runtime finds its ROMs and assets "
                "(ale-py, vizdoom) and renders nothing; drop it"
            )
    unknown = sorted(key for key in options if key not in known and key not in backend_names)
    if unknown:
        foreign = [key for key in unknown if key in VIZDOOM_CFG_OPTIONS or key in ATARI_DEFAULTS]
        if spec.family == "vizdoom" and foreign:
            raise ValueError(
                f"{', '.join(foreign)}: envpool's ViZDoom options are not mapped; gymnasium's ViZDoom takes "
                f"them from the scenario's .cfg. {task_id} here takes {', '.join(VIZDOOM_DEFAULTS)}"
            )
        raise TypeError(
            f"make({task_id!r}) got unknown options {unknown}: envpool's options for this task are "
            f"{', '.join(sorted(known))}; backend={backend!r} takes {', '.join(sorted(backend_names)) or 'none'}"
        )
    values = {**known, **{key: options[key] for key in options if key in known}}
    for key, reason in REFUSED_VALUES.items():
        if key in values and values[key] != known[key]:
            raise ValueError(f"{key}={values[key]!r} is not supported: {reason} (envpool's default: {known[key]!r})")
    if env_type == "gymnasium":
        if options.get("gym_reset_return_info") is False:
            raise ValueError("gym_reset_return_info=False: gymnasium's reset returns (obs, info); use env_type='gym'")
        values["gym_reset_return_info"] = True
    vector_kwargs = {"copy": True, **(vector_kwargs or {})}
    if batch < num_envs:
        vector_kwargs["batch_size"] = batch
    threads = int(values["num_threads"])
    if threads > 0:
        if num_envs % threads or "envs_per_server" in vector_kwargs:
            raise ValueError(
                f"num_threads={threads} runs {threads} env servers, so num_envs={num_envs} must be a multiple of "
                "it (and vector_kwargs must not set envs_per_server as well); num_threads=0 picks one per core"
            )
        vector_kwargs["envs_per_server"] = num_envs // threads
    if env_seed is not None:
        seed = list(env_seed)
    if isinstance(seed, (list, tuple, np.ndarray)) and len(seed) != num_envs:
        raise ValueError(f"a list of seeds needs one per env: got {len(seed)} for num_envs={num_envs}")
    preset_kwargs = _preset_kwargs(spec, values)
    backend_options = {key: options[key] for key in options if key in backend_names}
    portal = make_vec(
        f"portal_shm.presets:{spec.family}",
        num_envs,
        backend=backend,
        vector_kwargs=vector_kwargs,
        env_kwargs=preset_kwargs,
        **backend_options,
    )
    try:
        reshape = None
        shape = portal.single_observation_space.shape
        if shape is not None and len(shape) == 4:  # (stack, 3, h, w) -> envpool's (3 * stack, h, w)
            reshape = (shape[0] * shape[1],) + tuple(shape[2:])
        config = {
            "num_envs": num_envs,
            "batch_size": batch,
            "seed": seed,
            **values,
            "task": spec.env_id.split("/")[-1].rsplit("-", 1)[0].lower() if spec.family == "atari" else task_id,
        }
        return EnvPool(portal, spec, env_type, config, seed, reshape)
    except BaseException:
        portal.close()
        raise


def make_gymnasium(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gymnasium", ...)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gym", ...)``: ``reset()`` returns observations, ``step`` 4-tuples."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="dm")``, which is refused (see ``make``)."""
    return make(task_id, "dm", **kwargs)
