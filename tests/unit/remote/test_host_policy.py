"""The host's policy on its own: what an agent's hello may ask for, and the refusals' messages.

No host, no Docker: ``HostPolicy.grant`` is what a host's session calls on every hello (the attacks
against a real host and real containers are ``tests/integration/test_host_policy.py``).
"""

import dataclasses
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import portal_shm
from portal_shm.agent.contract.options import HOSTED as VECTOR_OPTIONS
from portal_shm.cli.app import build_parser
from portal_shm.cli.remote import host_policy
from portal_shm.errors import HostPolicyError, PortalError
from portal_shm.remote.host.policy import (
    AGENT_RUNTIME_OPTIONS,
    PRESET_ENTRY_POINTS,
    Grant,
    HostPolicy,
    dotted_match,
    parse_bytes,
)
from portal_shm.runtimes.docker import DockerBackend
from portal_shm.runtimes.process import ProcessBackend
from portal_shm.runtimes.registry import BACKENDS
from portal_shm.runtimes.venv import VenvBackend

DEFAULT = HostPolicy()


def grant(policy=DEFAULT, num_envs=2, **hello):
    hello.setdefault("env_id", "CartPole-v1")
    hello.setdefault("runtime", "process")
    return policy.grant(hello, num_envs)


def refused(match, policy=DEFAULT, **hello):
    with pytest.raises(HostPolicyError, match=match):
        grant(policy, **hello)


# -- patterns ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, pattern, expected",
    [
        ("pkg.envs:Walker", "pkg.envs:*", True),
        ("pkg.envs:os.system", "pkg.envs:*", False),  # '*' stays within one dotted part
        ("pkg.envs.sub:Walker", "pkg.envs:*", False),
        ("pkg.envs:_private", "pkg.envs:*", False),  # never a '_' part by wildcard
        ("pkg.envs:__builtins__", "pkg.envs:*", False),
        ("pkg.envs:_private", "pkg.envs:_*", True),  # unless the pattern spells it
        ("pkg.envs:Walker", "pkg.*:Walker", True),
        ("pkg.envs:Walker", "pkg.envs:W?lker", True),
        ("os:system", "portal_shm.presets:*", False),
    ],
)
def test_dotted_patterns_keep_wildcards_within_one_public_part(name, pattern, expected):
    assert dotted_match(name, pattern) is expected


@pytest.mark.parametrize("value, expected", [(1024, 1024), ("512m", 512 << 20), ("4g", 4 << 30), ("2GB", 2 << 30)])
def test_memory_sizes_read_as_docker_writes_them(value, expected):
    assert parse_bytes(value, "mem_limit") == expected


@pytest.mark.parametrize("value", ["lots", "-1g", 0, -5, True, None, [1], "1e9", "0m"])
def test_memory_sizes_that_are_not_are_refused(value):
    with pytest.raises(HostPolicyError, match="not a memory size"):
        parse_bytes(value, "mem_limit")


# -- env ids and entry points --------------------------------------------------------------------


def test_registered_ids_and_the_presets_are_granted_by_default():
    result = grant(env_id="CartPole-v1", env_kwargs={"max_episode_steps": 5})
    assert result == Grant("CartPole-v1", {"max_episode_steps": 5}, ProcessBackend(), {"max_ring_bytes": 1 << 30})
    for entry_point in PRESET_ENTRY_POINTS:
        assert grant(env_id=entry_point).env_id == entry_point


@pytest.mark.parametrize(
    "env_id",
    [
        "os:system",
        "subprocess:run",
        "builtins:exec",
        "importlib:import_module",
        "antigravity:fly",  # acts on import
        "portal_shm.server.example_envs:NullEnv",
        "portal_shm.presets:os.system",
        "portal_shm.presets:__builtins__",
    ],
)
def test_entry_points_outside_the_patterns_are_refused_naming_the_flag(env_id):
    refused("--entry-points", env_id=env_id)


def test_entry_points_are_allowed_exactly_by_the_operators_patterns():
    policy = HostPolicy(entry_points=("portal_shm.server.example_envs:*",))
    assert grant(policy, env_id="portal_shm.server.example_envs:NullEnv").env_id.endswith("NullEnv")
    refused("--entry-points", policy, env_id="portal_shm.server.example_envs:os.system")
    refused("--entry-points", policy, env_id="portal_shm.presets:atari")  # the patterns replace the default


@pytest.mark.parametrize("env_id", ["pkg:", ":f", "a b:c", "pkg:f()", "pkg:f;g", "x" * 300 + ":f"])
def test_malformed_entry_points_are_refused(env_id):
    refused("not of the form package.module:callable", env_id=env_id)


def test_unregistered_ids_are_refused_naming_plugins_and_envs():
    refused("not registered on this host.*--plugins.*--envs", env_id="NoSuchEnv-v0")
    refused("characters no env id has", env_id="Cart Pole\n-v1")
    refused("not a string", env_id=7)


def test_env_patterns_replace_the_registry():
    policy = HostPolicy(envs=("CartPole-*", "ALE/*"))
    assert grant(policy, env_id="CartPole-v1").env_id == "CartPole-v1"
    assert grant(policy, env_id="ALE/OnlyInAnImage-v5").env_id == "ALE/OnlyInAnImage-v5"
    refused("--envs", policy, env_id="Acrobot-v1")


def test_a_presets_env_id_argument_is_checked_as_an_env_id():
    assert grant(env_id="portal_shm.presets:atari", env_kwargs={"env_id": "ALE/Breakout-v5"}).env_kwargs
    refused("--entry-points", env_id="portal_shm.presets:atari", env_kwargs={"env_id": "evil_on_import:Env"})
    refused("not of the form", env_id="portal_shm.presets:atari", env_kwargs={"env_id": "evil_on_import:Env-v0"})
    refused("not registered", env_id="portal_shm.presets:atari", env_kwargs={"env_id": "NoSuchEnv-v0"})


def test_the_multi_agent_adapters_nested_env_kwargs_are_checked_as_the_inner_envs_own():
    """make_vec_ma nests the env's kwargs (any names reach it): a host checks them against the inner
    env's arguments and its path rule, as it checks a preset's env kwargs; an inner ``env_id`` is an env."""
    policy = HostPolicy(entry_points=("portal_shm.server.multi_agent:*", "portal_shm.server.example_envs:*"))
    adapter, inner = "portal_shm.server.multi_agent:parallel", "portal_shm.server.example_envs:named_agents_env"

    def nested(env_kwargs, policy=policy):
        return grant(policy, env_id=adapter, env_kwargs={"env_id": inner, "groups": None, "env_kwargs": env_kwargs})

    given = {"num_envs": 3, "groups": "theirs", "num_agents": 2, "env_id": "CartPole-v1"}
    assert nested(given).env_kwargs["env_kwargs"] == given
    with pytest.raises(HostPolicyError, match=f"env kwarg 'bogus' is not an argument of '{inner}'"):
        nested({"bogus": 1})
    with pytest.raises(HostPolicyError, match="env kwarg groups='/etc/passwd' names a path on the host"):
        nested({"groups": "/etc/passwd"})
    assert nested({"groups": "/srv/maps"}, HostPolicy(entry_points=policy.entry_points, env_kwargs=("groups",)))
    with pytest.raises(HostPolicyError, match="not registered on this host"):
        nested({"env_id": "NoSuchEnv-v0"})
    with pytest.raises(HostPolicyError, match="env kwargs must be a dict"):
        nested([1])


# -- env kwargs ------------------------------------------------------------------------------------


def test_env_kwargs_are_those_the_constructor_declares():
    assert grant(env_kwargs={"sutton_barto_reward": True, "render_mode": "rgb_array"}).env_kwargs
    refused(
        r"env kwarg 'bogus' is not an argument of 'CartPole-v1' \(it declares .*sutton_barto_reward",
        env_kwargs={"bogus": 1},
    )
    assert grant(HostPolicy(env_kwargs=("bog*",)), env_kwargs={"bogus": 1}).env_kwargs == {"bogus": 1}


def test_var_keywords_admit_only_what_a_preset_forwards_to_its_env():
    assert grant(env_id="portal_shm.presets:atari", env_kwargs={"repeat_action_probability": 0.0}).env_kwargs
    refused("not an argument of 'portal_shm.presets:atari'", env_id="portal_shm.presets:atari", env_kwargs={"bogus": 1})
    pytest.importorskip("vizdoom")
    # ViZDoom's **kwargs become engine options: vizdoom_path runs a program, game_args writes files
    for key in ("vizdoom_path", "game_args"):
        refused(
            f"env kwarg '{key}' is not an argument of 'VizdoomBasic-v1'",
            env_id="VizdoomBasic-v1",
            env_kwargs={key: "x"},
        )
        refused("not an argument", env_id="portal_shm.presets:vizdoom", env_kwargs={key: "x"})
    assert grant(env_id="VizdoomBasic-v1", env_kwargs={"frame_skip": 4}).env_kwargs == {"frame_skip": 4}


def test_a_batched_preset_takes_its_per_env_presets_options_but_not_its_servers_env_count():
    """``presets.atari_vector`` forwards ``**options`` to ``presets.atari``: the host reads them from its
    signature (``native.agent_signature``); ``num_envs`` is each env server's own to give."""
    vector = "portal_shm.presets:atari_vector"
    options = {"env_id": "ALE/Breakout-v5", "noop_max": 6, "fire_reset": True, "num_threads": 2}
    assert grant(env_id=vector, env_kwargs=options).env_kwargs == options
    assert grant(env_id=vector, env_kwargs={"repeat_action_probability": 0.0}).env_kwargs  # (ALE's own)
    refused("env kwarg 'num_envs' is not an argument of", env_id=vector, env_kwargs={"num_envs": 10**6})
    refused("env kwarg 'num_servers' is not an argument of", env_id=vector, env_kwargs={"num_servers": 1})
    refused("env kwarg 'bogus' is not an argument of", env_id=vector, env_kwargs={"bogus": 1})
    refused("num_threads=100000 passes this host's cap 64", env_id=vector, env_kwargs={"num_threads": 10**5})


@pytest.mark.parametrize("value", ["/etc/passwd.cfg", "~/x.cfg", "../../x.cfg", "a/../../b", ["ok", {"f": "/etc/x"}]])
def test_env_kwargs_that_name_paths_on_the_host_are_refused(value):
    refused("names a path on the host.*--env-kwargs render_mode", env_kwargs={"render_mode": value})
    assert grant(HostPolicy(env_kwargs=("render_mode",)), env_kwargs={"render_mode": value}).env_kwargs


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"__class__": 1}, "not a public Python name"),
        ({"_private": 1}, "not a public Python name"),
        ({"render_mode": "x" * 100_000}, "bytes packed"),
        ({"render_mode": [[[[[[[[[[1]]]]]]]]]]}, "nests deeper"),
        ({"render_mode": list(range(2000))}, "entries in one list"),
        ({"render_mode": {1: 2}}, "keys must be strings"),
        ([1, 2], "must be a dict"),
    ],
)
def test_env_kwargs_are_bounded_plain_data(kwargs, match):
    refused(match, env_id="portal_shm.presets:atari", env_kwargs=kwargs)


# -- runtime options ---------------------------------------------------------------------------------


def _operator_fields(runtime):
    return [f.name for f in dataclasses.fields(BACKENDS[runtime]) if f.name not in AGENT_RUNTIME_OPTIONS[runtime]]


@pytest.mark.parametrize(
    "runtime, option", [(r, f) for r in ("process", "docker", "venv", "micromamba") for f in _operator_fields(r)]
)
def test_every_other_field_of_a_runtime_is_the_operators(runtime, option):
    policy = HostPolicy(runtimes=("process", "docker", "venv", "micromamba"), agent_installs=True)
    refused(
        f"runtime option '{option}' of the {runtime} runtime is the host operator's",
        policy,
        runtime=runtime,
        runtime_options={option: None},
    )


def test_docker_refusals_name_the_defaults_that_hold():
    refused(
        "non-root user, with all capabilities dropped, no network", runtime="docker", runtime_options={"user": "0:0"}
    )
    for option in ("extra_run_args", "ipc_host", "read_only", "privileged", "volumes", "network_mode", "devices"):
        refused("operator's", runtime="docker", runtime_options={option: True})


@pytest.mark.parametrize(
    "options, match",
    [
        ({"mem_limit": "64g"}, "at most this host's cap 4g"),
        ({"mem_limit": "0.5b"}, "at least 6m"),  # 0 bytes: no limit at all to docker
        ({"mem_limit": "lots"}, "not a memory size"),
        ({"cpus": 10_000}, "--max-cpus"),
        ({"cpus": 0}, "--max-cpus"),
        ({"cpus": 1e-10}, "--max-cpus"),  # 0 nano-CPUs: no limit at all to docker
        ({"cpus": float("nan")}, "--max-cpus"),
        ({"pids_limit": 10**6}, "--max-pids"),
        ({"pids_limit": 0}, "--max-pids"),
        ({"image": "Portal Shm/ale;rm"}, "not an image name"),
        ({"image": "-v/:/host"}, "not an image name"),
    ],
)
def test_container_limits_are_capped_by_the_host(options, match):
    refused(match, runtime="docker", runtime_options=options)


def test_limits_left_out_or_none_are_the_hosts_caps():
    offers = HostPolicy(max_mem="2g", max_cpus=1.5, max_pids=100).offers()
    pids = DockerBackend.pids_limit
    for options in ({}, {"mem_limit": None, "cpus": None, "pids_limit": None}):
        assert offers.container_limits(options, pids) == (2 << 30, 1.5, 100)
    assert offers.container_limits({"mem_limit": "512m", "cpus": 0.5, "pids_limit": 7}, pids) == (512 << 20, 0.5, 7)
    # no --max-cpus: every core, no cpu limit; the runtime's own default pids, within the cap
    assert DEFAULT.offers().container_limits({}, 256) == (4 << 30, None, 256)


def test_interpreters_are_picked_by_name_never_by_path():
    refused(
        r"never a path; this host offers none \(portal-shm host --python NAME=PATH\)",
        runtime_options={"python": "/bin/sh"},
    )
    policy = HostPolicy(pythons={"mine": sys.executable})
    assert grant(policy, runtime_options={"python": "mine"}).backend == ProcessBackend(python=sys.executable)
    refused("offers mine", policy, runtime_options={"python": sys.executable})


def test_venvs_are_the_operators_unless_agent_installs():
    policy = HostPolicy(runtimes=("venv",), venvs={"old": "gym==0.21 numpy<1.24", "file": "@/srv/reqs.txt"})
    assert grant(policy, runtime="venv", runtime_options={"venv": "old"}).backend == VenvBackend(
        requirements=("gym==0.21", "numpy<1.24")
    )
    assert grant(policy, runtime="venv", runtime_options={"venv": "file"}).backend.requirements_file == "/srv/reqs.txt"
    refused("offers file, old", policy, runtime="venv", runtime_options={"venv": "other"})
    refused("--agent-installs", policy, runtime="venv", runtime_options={"requirements": ["gym==0.21"]})
    installs = dataclasses.replace(policy, agent_installs=True)
    assert grant(installs, runtime="venv", runtime_options={"requirements": ["gym==0.21"]}).backend.requirements == (
        "gym==0.21",
    )
    for requirement in (
        "-r /etc/passwd",
        "--index-url=http://x",
        "-e .",
        "./pkg",
        "/srv/pkg",
        "file:///x",
        "~/p",
        "pkg @ file:///etc",
        "pkg @ /srv/pkg",
        "pkg@./x",
    ):
        refused("never installer options", installs, runtime="venv", runtime_options={"requirements": [requirement]})


def test_micromamba_envs_are_picked_by_name(tmp_path):
    spec = tmp_path / "env.yml"
    spec.write_text("dependencies: [python=3.11]\n")
    policy = HostPolicy(runtimes=("micromamba",), micromambas={"old": str(spec)})
    assert grant(policy, runtime="micromamba", runtime_options={"micromamba": "old"}).backend.spec == str(spec)
    refused("offers old", policy, runtime="micromamba", runtime_options={"micromamba": "/etc/passwd"})


def test_runtimes_the_host_does_not_offer_are_refused():
    refused(
        r"does not run envs on the 'venv' runtime; it offers process, docker \(portal-shm host --runtimes",
        runtime="venv",
    )
    refused("does not run envs on the 'attach' runtime", runtime="attach")
    refused("runtime options must be a dict", runtime_options=[("python", "x")])


# -- vector kwargs and call names ------------------------------------------------------------------


def test_vector_options_are_checked_and_an_unknown_one_is_an_error():
    vector = {"batch_size": 2, "ring_depth": 3, "step_timeout": None, "autoreset_mode": "SameStep"}
    assert grant(num_envs=4, vector=vector).vector == {**vector, "max_ring_bytes": 1 << 30}
    refused("vector_kwargs key 'ring_dpeth' is not one an env host takes", vector={"ring_dpeth": 3})


@pytest.mark.parametrize(
    "vector",
    [
        {"info_capacity": 2**40},
        {"ring_depth": 10**6},
        {"ring_depth": 1},
        {"batch_size": 3},  # more than the host's 2 envs
        {"startup_timeout": -1},
        {"step_timeout": float("inf")},
        {"max_restarts": True},
        {"autoreset_mode": "Sometimes"},
    ],
)
def test_vector_option_values_outside_their_range_are_refused(vector):
    refused("vector_kwargs .*: give", vector=vector)


def test_call_names_are_public_and_match_the_patterns():
    assert DEFAULT.check_call("render") == "render"
    assert DEFAULT.check_call("get_wrapper_attr", ["np_random_seed"]) == "get_wrapper_attr"
    for accessor, args in (
        ("get_wrapper_attr", ["_np_random_seed"]),
        ("set_wrapper_attr", ["_max_episode_steps", 1]),
        ("has_wrapper_attr", []),
        ("get_wrapper_attr", "x"),
    ):
        with pytest.raises(HostPolicyError):
            DEFAULT.check_call(accessor, args)
    for name in ("__init__", "__dict__", "_np_random", "a.b", "", 3, "x" * 200):
        with pytest.raises(HostPolicyError, match="not a public Python name"):
            DEFAULT.check_call(name)
    with pytest.raises(HostPolicyError, match="--calls"):
        HostPolicy(calls=("get_wrapper_attr",)).check_call("render")


# -- any hello ----------------------------------------------------------------------------------------

OPTION_NAMES = sorted({f.name for cls in BACKENDS.values() for f in dataclasses.fields(cls)} | {"venv", "micromamba"})
plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
option_dicts = st.dictionaries(st.sampled_from(OPTION_NAMES) | st.text(max_size=12), plain, max_size=4)
vector_dicts = st.dictionaries(st.sampled_from(sorted(VECTOR_OPTIONS)) | st.text(max_size=12), plain, max_size=4)
kwarg_dicts = st.dictionaries(
    st.sampled_from(["max_episode_steps", "render_mode", "env_id"]) | st.text(max_size=12), plain, max_size=3
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runtime=st.sampled_from(["process", "docker", "venv", "micromamba", "attach"]) | plain,
    env_id=st.sampled_from(["CartPole-v1", "portal_shm.presets:atari", "os:system"]) | plain,
    options=option_dicts | plain,
    vector=vector_dicts | plain,
    kwargs=kwarg_dicts | plain,
)
def test_any_hello_is_granted_with_the_operators_runtime_or_refused(runtime, env_id, options, vector, kwargs):
    policy = HostPolicy(runtimes=("process", "docker", "venv"), pythons={"mine": sys.executable}, venvs={"v": "gym"})
    hello = {"env_id": env_id, "runtime": runtime, "runtime_options": options, "vector": vector, "env_kwargs": kwargs}
    try:
        result = policy.grant(hello, 4)
    except HostPolicyError:
        return
    assert result.backend.name == runtime
    allowed = set(AGENT_RUNTIME_OPTIONS[runtime])
    defaults = BACKENDS[runtime](**({"image": DockerBackend.image} if runtime == "docker" else {}))
    for f in dataclasses.fields(result.backend):
        if f.name not in allowed and f.name not in (
            "requirements",
            "requirements_file",
            "mem_limit",
            "cpus",
            "pids_limit",
        ):
            assert getattr(result.backend, f.name) == getattr(defaults, f.name), f.name
    assert set(result.vector) <= set(VECTOR_OPTIONS) | {"max_ring_bytes"} and result.vector["max_ring_bytes"] == 1 << 30
    if runtime == "process":
        assert result.backend.python in (None, sys.executable)


# -- the operator's flags ---------------------------------------------------------------------------------


def test_host_flags_make_the_policy(tmp_path):
    args = build_parser().parse_args(
        [
            "host",
            "--envs",
            "ALE/*, CartPole-v1",
            "--entry-points",
            "mypkg:*",
            "--python",
            f"mine={sys.executable}",
            "--venv",
            "old=gym==0.21 numpy<1.24",
            "--max-mem",
            "2g",
            "--max-cpus",
            "1.5",
            "--agent-installs",
            "--calls",
            "render,get_wrapper_attr",
        ]
    )
    policy = host_policy(args)
    assert policy.envs == ("ALE/*", "CartPole-v1") and policy.entry_points == ("mypkg:*",)
    assert policy.pythons == {"mine": sys.executable} and policy.venvs == {"old": "gym==0.21 numpy<1.24"}
    assert (policy.max_mem, policy.max_cpus, policy.agent_installs) == ("2g", 1.5, True)
    assert policy.calls == ("render", "get_wrapper_attr")
    assert host_policy(build_parser().parse_args(["host"])) == HostPolicy()


@pytest.mark.parametrize(
    "policy, match",
    [
        (HostPolicy(runtimes=("process", "ssh")), "--runtimes ssh"),
        (HostPolicy(max_mem="lots"), "not a memory size"),
        (HostPolicy(pythons={"x": "/no/such/python"}), "--python x=/no/such/python"),
        (HostPolicy(micromambas={"x": "/no/such.yml"}), "--micromamba x=/no/such.yml"),
    ],
)
def test_bad_operator_flags_stop_the_host_with_the_flag_named(policy, match):
    with pytest.raises(PortalError, match=match):
        policy.check()


def test_ray_hosts_take_the_drivers_policy_with_its_one_runtime():
    backend = portal_shm.backends.RayBackend(runtime="docker", host_policy=HostPolicy(entry_points=("mypkg:*",)))
    assert backend.policy() == HostPolicy(runtimes=("docker",), entry_points=("mypkg:*",))
    assert portal_shm.backends.RayBackend().policy() == HostPolicy(runtimes=("process",))
    with pytest.raises(PortalError, match="host_policy must be a portal_shm.backends.HostPolicy"):
        portal_shm.backends.RayBackend(host_policy={"entry_points": "*"}).check()


# -- sizes an agent may ask for (issue 35) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (
            {"stack": 12000},
            "stack=12000 passes this host's cap 64 (the operator raises it with portal-shm host --size-cap stack=N)",
        ),
        ({"screen_size": [84, 100000]}, "screen_size=[84, 100000] passes this host's cap 1024"),
        ({"frame_skip": 10**9}, "--size-cap frame_skip=N"),
        ({"stack": True}, "sizes memory: give a non-negative integer"),
        ({"stack": -1}, "sizes memory: give a non-negative integer"),
        ({"noop_max": "30"}, "sizes memory: give a non-negative integer"),
    ],
)
def test_kwargs_that_size_memory_are_capped_before_anything_is_made(kwargs, text):
    with pytest.raises(HostPolicyError, match=re.escape(text)):
        grant(env_id="portal_shm.presets:atari", env_kwargs=kwargs)


def test_the_operator_raises_a_size_cap_and_the_presets_within_it_pass():
    assert grant(env_id="portal_shm.presets:atari", env_kwargs={"stack": 64, "screen_size": [84, 84]}).env_kwargs
    args = build_parser().parse_args(["host", "--size-cap", "stack=128", "--max-ring-bytes", "2g"])
    policy = host_policy(args)
    assert policy.size_caps["stack"] == 128 and policy.size_caps["screen_size"] == 1024
    assert grant(policy, env_id="portal_shm.presets:atari", env_kwargs={"stack": 100}).vector == {
        "max_ring_bytes": 2 << 30
    }
    with pytest.raises(PortalError, match="--size-cap stack=x: give a positive integer"):
        host_policy(build_parser().parse_args(["host", "--size-cap", "stack=x"]))


def test_an_agent_cannot_set_the_ring_cap_itself():
    with pytest.raises(HostPolicyError, match="vector_kwargs key 'max_ring_bytes' is not one an env host takes"):
        grant(vector={"max_ring_bytes": 1 << 40})
