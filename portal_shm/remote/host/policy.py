"""What an agent may ask of an env host: the operator's allow-lists, checked against every hello.

An agent key is a right to envs, not a shell. Everything an agent names (the env id or entry
point, the runtime and its options, vector and env kwargs, and later the attribute names of
``call``/``get_attr``/``set_attr``) is data checked here against what the operator started the host
with. What passes is rebuilt from the operator's own values: the runtime is a ``Backend`` built by
its own ``for_agent`` from the options its class lets agents set (``agent_options``, allow-listed
here by name), each value checked against what the operator offers (``runtime_offers.py``), never
``Backend(**agent_options)``. A refusal is a ``HostPolicyError`` that names the ``portal-shm host``
flag that would allow it.

The only modules the host itself imports are the operator's: the plugins it names (to fill its
gymnasium registry), and the constructors of envs its registry or its entry-point patterns already
allow (to read which keyword arguments they declare).
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from ...errors import HostPolicyError, PortalError
from ...runtimes.backend import Backend
from ...runtimes.registry import BACKENDS, hosted_runtimes
from ...server.envs import PLUGIN_MODULES, load_entry_point
from .request_values import MAX_NAME, check_name, check_plain, check_vector_options
from .runtime_offers import RuntimeOffers, flag, parse_bytes

log = logging.getLogger("portal_shm.host")

DEFAULT_RUNTIMES = ("process", "docker")
DEFAULT_PLUGINS = tuple(dict.fromkeys(module for _, module in PLUGIN_MODULES))
PRESET_ENTRY_POINTS = tuple(
    f"{m}:{f}"
    for m in ("portal_shm.presets", "portal_shm.server.presets")
    for f in ("atari", "atari_vector", "vizdoom")
)

# What an agent may set per runtime (``Backend.agent_options``) of the built-in backends; the host
# itself asks the registry each time, which also holds backends registered later.
AGENT_RUNTIME_OPTIONS = {name: BACKENDS[name].agent_options for name in hosted_runtimes()}
# Arguments gymnasium.make itself takes beside the env's own.
MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker", "render_mode"})

_ENTRY_POINT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV_ID = re.compile(r"[\w./-]{1,200}")
# gymnasium's accessors take the attribute's name as their first argument: checked as one.
ACCESSORS = frozenset({"get_wrapper_attr", "set_wrapper_attr", "has_wrapper_attr"})
# Env kwargs that size memory, and how large an agent may ask for them (``--size-cap NAME=N``): the
# presets' and envpool's names for frame stacks, frame sizes and skips. A plain int is the cheapest
# amplifier there is (``stack=12000`` made a server allocate ~1 GB before anything else was checked).
DEFAULT_SIZE_CAPS = {
    "stack": 64,
    "stack_num": 64,
    "frame_stack": 64,
    "screen_size": 1024,
    "img_height": 1024,
    "img_width": 1024,
    "frameskip": 64,
    "frame_skip": 64,
    "noop_max": 1000,
    "noop_min": 1000,
    "size": 1024,
    "num_threads": 64,  # threads of a native vector env (``presets.atari_vector``), each with its stack
}
DEFAULT_MAX_RING = "1g"
_registries: dict[
    tuple[str, ...], frozenset[str]
] = {}  # plugins -> the env ids registered once they are imported (one registry per process)
_registry_lock = threading.Lock()


def _host_path(value: Any) -> Optional[str]:
    """The first string in ``value`` that names a file outside an env's own (absolute, from home,
    or climbing out with ``..``), else None."""
    if isinstance(value, str):
        parts = value.replace("\\", "/").split("/")
        return value if value.startswith(("/", "~")) or ".." in parts else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _host_path(item)
        if found is not None:
            return found
    return None


def dotted_match(name: str, pattern: str) -> bool:
    """Glob over dotted names, where ``*`` stays within one part (``pkg.mod:*`` matches
    ``pkg.mod:Env``, not ``pkg.mod:os.system``) and never matches a part that starts with ``_``
    unless the pattern spells the underscore."""
    regex = ""
    for i, char in enumerate(pattern):
        start = i == 0 or pattern[i - 1] in ".:"
        if char == "*":
            regex += ("(?!_)" if start else "") + r"[^.:]*"
        elif char == "?":
            regex += ("(?!_)" if start else "") + r"[^.:]"
        else:
            regex += re.escape(char)
    return re.fullmatch(regex, name) is not None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Grant:
    """What a hello may run, rebuilt from the operator's values: the local portal's inputs."""

    env_id: str
    env_kwargs: dict[str, Any]
    backend: Backend
    vector: dict[str, Any]


@dataclass(frozen=True)
class HostPolicy:
    """The operator's allow-lists; each field is a flag of ``portal-shm host``.

    Args:
        runtimes: runtimes agents may ask for (``--runtimes``).
        envs: globs over env ids (``--envs 'ALE/*,CartPole-v1'``); default: every id in the host's
            gymnasium registry once ``plugins`` are imported.
        plugins: modules the host imports to fill its registry (``--plugins``); missing ones are skipped.
        entry_points: globs over ``module:callable`` (``--entry-points``); default: the project's presets.
        images: globs over docker images (``--images``); default: images labelled as portal-shm env
            images (``portal-shm build`` labels what it builds).
        max_mem: cap of a container's ``mem_limit``; containers get the cap when the agent asks
            for none (as for the two below).
        max_cpus: cap of a container's ``cpus``.
        max_pids: cap of a container's ``pids_limit``.
        pythons: interpreters the process and venv runtimes offer, by name (``--python NAME=PATH``).
        venvs: venvs by name, as their requirements (``--venv NAME='REQ REQ'``, or ``NAME=@FILE``).
        micromambas: micromamba envs by name, as their spec file (``--micromamba NAME=SPEC.yml``).
        agent_installs: agents may name packages for the venv runtime (``--agent-installs``):
            installing a package runs its code on this host, so it is a right to run code here.
        env_kwargs: globs over env kwarg names allowed beside those the env's constructor declares.
        calls: globs over the names of ``call``/``get_attr``/``set_attr`` (public names only).
        pickled_states: agents may save and restore env states the envs' runtime pickles
            (``--pickled-states``): unpickling runs code, so it is a right to run code in the runtime.
        size_caps: the largest value of each env kwarg that sizes memory (``--size-cap NAME=N``;
            an int, or each int of a list such as ``screen_size=(h, w)``).
        max_ring_bytes: the largest ring a session's envs may declare spaces for (``--max-ring-bytes``),
            checked once their servers said their spaces, before the ring is made.
    """

    runtimes: tuple[Any, ...] = DEFAULT_RUNTIMES
    envs: Optional[tuple[Any, ...]] = None
    plugins: tuple[Any, ...] = DEFAULT_PLUGINS
    entry_points: tuple[Any, ...] = PRESET_ENTRY_POINTS
    images: Optional[tuple[Any, ...]] = None
    max_mem: str = "4g"
    max_cpus: Optional[float] = None
    max_pids: int = 1024
    pythons: dict[str, Any] = field(default_factory=dict[str, Any])
    venvs: dict[str, Any] = field(default_factory=dict[str, Any])
    micromambas: dict[str, Any] = field(default_factory=dict[str, Any])
    agent_installs: bool = False
    env_kwargs: tuple[Any, ...] = ()
    calls: tuple[Any, ...] = ("*",)
    pickled_states: bool = False
    size_caps: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SIZE_CAPS))
    max_ring_bytes: str = DEFAULT_MAX_RING

    def check(self) -> None:
        """The operator's own values, on the host that applies them (a bad flag stops the host)."""
        hosted = hosted_runtimes()
        unknown = [r for r in self.runtimes if r not in hosted]
        if unknown:
            raise PortalError(f"--runtimes {','.join(map(str, unknown))}: hosts run envs on {', '.join(hosted)}")
        try:
            parse_bytes(self.max_ring_bytes, "--max-ring-bytes")
        except HostPolicyError as exc:
            raise PortalError(str(exc)) from None
        for name, cap in self.size_caps.items():
            if not isinstance(name, str) or isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise PortalError(f"--size-cap {name}={cap}: give a name and a positive integer")
        self.offers().check()

    def offers(self) -> RuntimeOffers:
        """What the operator offers the runtimes agents ask for (interpreters, venvs, caps, images)."""
        return RuntimeOffers(
            pythons=self.pythons,
            venvs=self.venvs,
            micromambas=self.micromambas,
            agent_installs=self.agent_installs,
            images=self.images,
            max_mem=self.max_mem,
            max_cpus=self.max_cpus,
            max_pids=self.max_pids,
        )

    # -- the operator's view ------------------------------------------------------------------
    def describe(self) -> str:
        """One line for the host's start-up log: what agents may run here (and how large)."""
        envs = flag(self.envs) if self.envs is not None else f"the {len(self.registry())} registered ids"
        images = self.offers().describe_images()
        caps = ", ".join(f"{k} {v}" for k, v in sorted(self.size_caps.items()))
        return (
            f"runtimes {','.join(self.runtimes)}; envs {envs}; entry points {flag(self.entry_points)}"
            + (f"; {images}" if "docker" in self.runtimes else "")
            + f"; rings up to {self.max_ring_bytes}; size caps {caps}"
        )

    def registry(self) -> frozenset[str]:
        """The env ids of the host's gymnasium registry, after importing the operator's plugins once."""
        with _registry_lock:
            if self.plugins not in _registries:
                import importlib

                import gymnasium

                missing = []
                for module in self.plugins:
                    try:
                        importlib.import_module(module)
                    except Exception:
                        missing.append(module)
                if missing:
                    log.info("plugins not installed on this host (their ids are not offered): %s", ", ".join(missing))
                _registries[self.plugins] = frozenset(gymnasium.envs.registry)
            return _registries[self.plugins]

    # -- a hello --------------------------------------------------------------------------------
    def grant(self, hello: dict[str, Any], num_envs: int) -> Grant:
        """The hello's env, runtime and options, checked; raises ``HostPolicyError`` naming the flag."""
        env_id = self.check_env(hello.get("env_id"))
        backend = self.backend(hello.get("runtime"), hello.get("runtime_options"))
        env_kwargs = self.check_env_kwargs(env_id, hello.get("env_kwargs"))
        vector = check_vector_options(hello.get("vector"), num_envs)
        vector["max_ring_bytes"] = parse_bytes(
            self.max_ring_bytes, "--max-ring-bytes"
        )  # the operator's, never an agent's
        return Grant(env_id, env_kwargs, backend, vector)

    def check_env(self, env_id: Any) -> str:
        if not isinstance(env_id, str):
            raise HostPolicyError(f"env id {env_id!r} is not a string")
        self._check_env(env_id)
        return str(env_id)

    def _check_env(self, env_id: str) -> None:
        if ":" in env_id:
            if len(env_id) > 200 or not _ENTRY_POINT.fullmatch(env_id):
                raise HostPolicyError(f"entry point {env_id[:200]!r} is not of the form package.module:callable")
            if not any(dotted_match(env_id, p) for p in self.entry_points):
                raise HostPolicyError(
                    f"entry point {env_id!r} is not allowed on this host: it serves entry points matching "
                    f"{flag(self.entry_points)} (the operator allows more with portal-shm host --entry-points PATTERNS)"
                )
            return
        if not _ENV_ID.fullmatch(env_id):
            raise HostPolicyError(f"env id {env_id[:200]!r} has characters no env id has")
        if self.envs is not None:
            if not any(fnmatch.fnmatchcase(env_id, p) for p in self.envs):
                raise HostPolicyError(
                    f"env id {env_id!r} is not allowed on this host: it serves ids matching {flag(self.envs)} "
                    "(portal-shm host --envs PATTERNS)"
                )
        elif env_id not in self.registry():
            raise HostPolicyError(
                f"env id {env_id!r} is not registered on this host (plugins {flag(self.plugins)}): install its "
                "package there and name it with portal-shm host --plugins MODULES, or allow ids by pattern with "
                "--envs PATTERNS (for ids that only an image registers)"
            )

    def check_call(self, name: Any, args: Any = ()) -> str:
        """An attribute name of ``call``/``get_attr``/``set_attr`` (and the name a gymnasium
        accessor called with ``args`` reaches)."""
        check_name(name, "attribute")
        if not any(fnmatch.fnmatchcase(name, p) for p in self.calls):
            raise HostPolicyError(
                f"attribute {name!r} is not allowed on this host: it allows {flag(self.calls)} (portal-shm host --calls)"
            )
        if name in ACCESSORS:
            if not isinstance(args, (list, tuple)) or not args:
                raise HostPolicyError(f"{name} takes the name of an attribute first")
            self.check_call(args[0])
        return str(name)

    # -- env kwargs -------------------------------------------------------------------------------
    def check_env_kwargs(self, env_id: str, kwargs: Any) -> dict[str, Any]:
        if kwargs is None:
            return {}
        if not isinstance(kwargs, dict):
            raise HostPolicyError(f"env kwargs must be a dict, got {type(kwargs).__name__}")
        check_plain(kwargs, "env kwargs")
        nested = "env_id" in kwargs and "env_kwargs" in kwargs
        if "env_id" in kwargs:  # presets and compatibility wrappers make the env they are given
            self.check_env(kwargs["env_id"])  # (first: its constructor is looked up below)
        if nested:  # the multi-agent adapters: the inner env's own kwargs, checked as its own
            self.check_env_kwargs(kwargs["env_id"], kwargs["env_kwargs"])
        declared = None
        for key, value in kwargs.items():
            check_name(key, "env kwarg")
            if nested and key == "env_kwargs":
                value = None  # (checked above, against the inner env's names and the operator's patterns)
            self.check_size(key, value)
            if any(fnmatch.fnmatchcase(key, p) for p in self.env_kwargs):
                continue
            path = _host_path(value)
            if path is not None:
                raise HostPolicyError(
                    f"env kwarg {key}={path[:100]!r} names a path on the host: agents do not choose the files an env "
                    f"opens (the operator allows it for this argument with portal-shm host --env-kwargs {key})"
                )
            if declared is None:
                declared = self.declared_kwargs(env_id, kwargs)
            if key not in declared:
                known = ", ".join(sorted(declared)) if declared else "none this host can see"
                raise HostPolicyError(
                    f"env kwarg {key!r} is not an argument of {env_id!r} (it declares {known}); the operator allows "
                    "other names with portal-shm host --env-kwargs NAMES"
                )
        return dict(kwargs)

    def check_size(self, key: str, value: Any) -> None:
        """An env kwarg that sizes memory (``size_caps``), within its cap."""
        cap = self.size_caps.get(key)
        if cap is None:
            return
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not items or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in items):
            raise HostPolicyError(
                f"env kwarg {key}={_short(value)} sizes memory: give a non-negative integer (or a list of them)"
            )
        if max(items) > cap:
            raise HostPolicyError(
                f"env kwarg {key}={_short(value)} passes this host's cap {cap} (the operator raises it with portal-shm "
                f"host --size-cap {key}=N)"
            )

    def declared_kwargs(self, env_id: str, kwargs: Optional[dict[str, Any]] = None) -> set[str]:
        """The keyword arguments ``env_id``'s constructor names, as far as this host can see them:
        its registry's entry for an id, the callable of an entry point the patterns allow. A
        ``**kwargs`` admits nothing by itself (ViZDoom's turn into engine options such as
        ``vizdoom_path``), except in a constructor that also takes ``env_id`` (the presets): its
        ``**kwargs`` are that env's. An env only an image has declares nothing here."""
        if ":" in env_id:
            names: set[str] = set()
            target: Any = env_id
        elif env_id in self.registry():
            import gymnasium

            spec = gymnasium.spec(env_id)
            names, target = set(spec.kwargs) | MAKE_KWARGS, spec.entry_point
        else:
            return set(MAKE_KWARGS)
        try:
            if isinstance(target, str):
                target = load_entry_point(target)
            params = inspect.signature(target).parameters
        except Exception:
            return names
        names |= {p.name for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        forwarded = params.get("env_id")
        if forwarded is not None and any(p.kind is p.VAR_KEYWORD for p in params.values()):
            inner = (kwargs or {}).get("env_id", forwarded.default)
            if isinstance(inner, str) and inner != env_id:
                names |= self.declared_kwargs(inner)
        return names

    # -- runtimes ---------------------------------------------------------------------------------
    def backend(self, runtime: Any, options: Any) -> Backend:
        """The runtime the agent asked for, built from the operator's values and the options agents may set."""
        cls = BACKENDS.get(runtime) if isinstance(runtime, str) and runtime in self.runtimes else None
        if cls is None or cls.agent_options is None:
            raise HostPolicyError(
                f"this host does not run envs on the {str(runtime)[:40]!r} runtime; it offers "
                f"{', '.join(self.runtimes)} (portal-shm host --runtimes ...)"
            )
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise HostPolicyError(f"runtime options must be a dict, got {type(options).__name__}")
        allowed = cls.agent_options
        for key in options:
            if key not in allowed:
                raise HostPolicyError(
                    f"runtime option {str(key)[:MAX_NAME]!r} of the {runtime} runtime is the host operator's to set, "
                    f"not an agent's: agents may set {', '.join(allowed)}"
                    + (f" ({cls.operator_note})" if cls.operator_note else "")
                )
        return cls.for_agent(options, self.offers())
