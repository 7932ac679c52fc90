"""An attacker's playbook against ``portal-shm host``: an agent whose key the host accepts tries
every way from "a right to envs" to "a shell on the host", and each is refused.

The hosts are real daemon processes with real CURVE keys, started from a scratch directory and with
a ``PYTHONPATH`` that holds ``evil_on_import.py``, a module that leaves a marker file when anything
imports it: the attacks that would run code name it, or commands that would create a marker. After
each attack the agent has a ``HostPolicyError`` whose message names the flag that would allow it
(where one would), no marker exists, the host has no child process left and its log has the refusal
of the agent's key. Where the operator's flag allows a thing, it runs (and fails, if it fails, as the
env's error, not the policy's).
The last tests are holes this playbook found and that are closed now: ViZDoom's engine options
through its ``**kwargs``, limits that docker reads as none, private names through gymnasium's
accessors, a refused hello that kept the agent waiting.
"""

import glob
import os
import re
import secrets
import sys
import tempfile
import time
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import portal_shm
from portal_shm import errors
from portal_shm.agent.contract.options import HOSTED as VECTOR_OPTIONS
from portal_shm.agent.contract.options import VectorOptions
from portal_shm.remote import frames
from portal_shm.remote.client.backend import RemoteBackend
from portal_shm.remote.client.vector import RemoteVectorPortal
from portal_shm.remote.host.policy import AGENT_RUNTIME_OPTIONS
from portal_shm.runtimes.docker import DockerBackend
from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys

pytestmark = pytest.mark.integration

GIB = 1 << 30
ALE = "portal-shm/ale"
BASE = "portal-shm/base:bookworm"  # no portal-shm.env-image label, no env server
MARKER = "{marker}"  # in an attack's arguments: the path of the file the attack would create

# The agent key is named after its file (agent.key); the host logs each refusal with it.
REFUSED = re.compile(r"refused \S+ \(agent[^)]*\)(?: #\d+)?: (.*)")  # (#n: the session's number)
STARTED = re.compile(r"session \S+ \(agent[^)]*\)(?: #\d+)?: \d+ x ")
ENDED = re.compile(r"session \S+ \(agent[^)]*\)(?: #\d+)? ended")
FAILED = re.compile(r"session .* failed|closing the envs of")
HOST_ERROR = re.compile(r"\S+ \S+ portal_shm\S* (ERROR|CRITICAL) ")

EVIL_ON_IMPORT = """\
# Acts on import: whoever imports this module ran the attacker's code.
import os

with open({marker!r}, "a") as handle:
    handle.write("imported by pid %d\\n" % os.getpid())

from portal_shm.server.example_envs import NullEnv as Env  # noqa: E402, F401
"""


# -- hosts, keys and the attacker's module -------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Keys(str(tmp_path_factory.mktemp("keys")))


class Lair:
    """A directory on the host's PYTHONPATH holding ``evil_on_import.py``, and its marker."""

    def __init__(self, root) -> None:
        self.path = str(root)
        self.marker = os.path.join(self.path, "imported")
        with open(os.path.join(self.path, "evil_on_import.py"), "w") as handle:
            handle.write(EVIL_ON_IMPORT.format(marker=self.marker))

    def untouched(self) -> bool:
        return not os.path.exists(self.marker)


@pytest.fixture(scope="module")
def lair(tmp_path_factory):
    return Lair(tmp_path_factory.mktemp("lair"))


class Hosts:
    """One real host per distinct flag set, started on first use, all with the lair importable."""

    def __init__(self, keys: Keys, lair: Lair, cwd: str) -> None:
        self.keys, self.lair, self.cwd = keys, lair, cwd
        self.started: dict = {}

    def __call__(self, *flags: str, lair=None) -> HostProcess:
        lair = lair or self.lair
        key = (flags, lair.path)
        if key not in self.started:
            with pytest.MonkeyPatch.context() as patch:
                # The host and its env servers inherit both: the attacker's module is importable
                # there, and what env runtimes write into their working directory lands in cwd.
                patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (lair.path, os.environ.get("PYTHONPATH")) if p))
                patch.chdir(self.cwd)
                self.started[key] = HostProcess(self.keys, *flags)
        return self.started[key]

    def stop(self) -> None:
        for host in self.started.values():
            host.stop()


@pytest.fixture(scope="module")
def hosts(keys, lair, tmp_path_factory):
    started = Hosts(keys, lair, str(tmp_path_factory.mktemp("host-cwd")))
    yield started
    started.stop()
    for host in started.started.values():
        assert host.process.returncode == 0, host.log
        assert not FAILED.search(host.log) and not host_errors(host.log), host.log


@pytest.fixture(scope="module")
def host(hosts):
    """The default host: what ``portal-shm host`` allows with no policy flags."""
    return hosts()


@pytest.fixture(scope="module")
def docker_client():
    from testkit.docker_images import docker_or_skip, ensure_image

    client = docker_or_skip()
    ensure_image(client, "ale", ALE)
    return client


# -- what the checks look at ----------------------------------------------------------------------


def remote(host, keys, env_id, n=1, /, **kwargs):
    return portal_shm.make_vec(env_id, n, backend="remote", hosts=[host.address], **keys.options(), **kwargs)


def children(pid: int) -> list:
    """The host's child processes (env servers, venv builds, shells): none may outlive a refusal."""
    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as handle:
                found += [int(p) for p in handle.read().split()]
        except OSError:
            pass
    return found


def eventually(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def host_errors(log: str) -> list:
    """Lines of the host's own failures: its ERROR records (a session's bug, with its traceback)
    and exceptions that escaped a thread. An env's traceback inside a refusal's WARNING is not one."""
    return [line for line in log.splitlines() if HOST_ERROR.match(line) or line.startswith("Exception in thread")]


def host_containers(client, host) -> list:
    labels = ["portal-shm.role=env-server", f"portal-shm.owner-pid={host.process.pid}"]
    return client.containers.list(all=True, filters={"label": labels})


def with_marker(value, marker: str):
    if isinstance(value, str):
        return value.replace(MARKER, marker)
    if isinstance(value, list):
        return [with_marker(v, marker) for v in value]
    if isinstance(value, dict):
        return {k: with_marker(v, marker) for k, v in value.items()}
    return value


def assert_refused(host, keys, lair, text, env_id, /, *, marker=None, backend=None, **kwargs):
    """The attack raises HostPolicyError with ``text`` (a flag name where a flag would allow it),
    the host logs the refusal of the agent's key, nothing started, nothing ran, no child is left."""
    since = len(host.log)
    with pytest.raises(portal_shm.errors.HostPolicyError, match=re.escape(text)) as info:
        if backend is not None:
            envs = portal_shm.make_vec(env_id, 1, backend=backend, **kwargs)
        else:
            envs = remote(host, keys, env_id, **kwargs)
        envs.close()  # (allowed: close it, then fail as "DID NOT RAISE")
    assert isinstance(info.value, portal_shm.PortalError)
    assert eventually(lambda: any(text in m for m in REFUSED.findall(host.log, since)), 5), host.log[since:]
    assert not STARTED.search(host.log, since), host.log[since:]
    assert eventually(lambda: not children(host.process.pid), 5), children(host.process.pid)
    assert host.process.poll() is None
    if marker is not None:
        assert not os.path.exists(marker), f"the attack ran: {marker} exists"
    assert lair.untouched(), "something imported the attacker's module"
    return info.value


# -- entry points: modules and callables that would run the attacker's code -----------------------

ENTRY_POINT_ATTACKS = [
    pytest.param("os:system", {"command": f"touch {MARKER}"}, "--entry-points", id="os.system"),
    pytest.param("os:popen", {"cmd": f"touch {MARKER}"}, "--entry-points", id="os.popen"),
    pytest.param("subprocess:run", {"args": ["touch", MARKER]}, "--entry-points", id="subprocess.run"),
    pytest.param("subprocess:Popen", {"args": ["touch", MARKER]}, "--entry-points", id="subprocess.Popen"),
    pytest.param("subprocess:getoutput", {"cmd": f"touch {MARKER}"}, "--entry-points", id="subprocess.getoutput"),
    pytest.param("builtins:exec", {"source": f"open({MARKER!r}, 'w')"}, "--entry-points", id="builtins.exec"),
    pytest.param("builtins:eval", {"source": f"open({MARKER!r}, 'w')"}, "--entry-points", id="builtins.eval"),
    pytest.param("builtins:__import__", {"name": "evil_on_import"}, "--entry-points", id="builtins.__import__"),
    pytest.param("importlib:import_module", {"name": "evil_on_import"}, "--entry-points", id="importlib.import_module"),
    pytest.param("runpy:run_module", {"mod_name": "evil_on_import"}, "--entry-points", id="runpy.run_module"),
    pytest.param("pickle:loads", {"data": b"cos\nsystem\n."}, "--entry-points", id="pickle.loads"),
    pytest.param("evil_on_import:Env", {}, "--entry-points", id="module-that-acts-on-import"),
    pytest.param("portal_shm.presets:__builtins__", {}, "--entry-points", id="preset-module-builtins"),
    pytest.param("portal_shm.presets:atari.__globals__", {}, "--entry-points", id="preset-function-globals"),
    pytest.param(
        "portal_shm.presets:gym.make", {"id": "evil_on_import:Env-v0"}, "--entry-points", id="preset-gym.make"
    ),
    pytest.param("portal_shm.server.presets:np.load", {"file": "/etc/passwd"}, "--entry-points", id="preset-np.load"),
    # gymnasium's own "module:Env-v0" form imports the module before it looks the id up
    pytest.param("evil_on_import:Env-v0", {}, "not of the form package.module:callable", id="gymnasium-module-id"),
    pytest.param("os:system;touch x", {}, "not of the form package.module:callable", id="entry-point-with-shell"),
    # the presets make the env they are given: that env id is checked as the hello's own
    pytest.param(
        "portal_shm.presets:atari",
        {"env_id": "evil_on_import:Env-v0"},
        "not of the form package.module:callable",
        id="preset-env_id-gymnasium-module-id",
    ),
    pytest.param(
        "portal_shm.presets:atari", {"env_id": "evil_on_import:Env"}, "--entry-points", id="preset-env_id-module"
    ),
    pytest.param(
        "portal_shm.server.presets:vizdoom",
        {"env_id": "os:system", "command": f"touch {MARKER}"},
        "--entry-points",
        id="preset-env_id-os.system",
    ),
    pytest.param(
        "portal_shm.presets:atari", {"env_id": ["ALE/Pong-v5"]}, "is not a string", id="preset-env_id-not-a-string"
    ),
]


@pytest.mark.parametrize("env_id, env_kwargs, text", ENTRY_POINT_ATTACKS)
def test_entry_points_into_os_subprocess_builtins_importlib_are_refused(
    host, keys, lair, tmp_path, env_id, env_kwargs, text
):
    marker = str(tmp_path / "pwned")
    assert_refused(host, keys, lair, text, env_id, marker=marker, env_kwargs=with_marker(env_kwargs, marker))


@pytest.mark.parametrize(
    "env_id",
    [
        "portal_shm.server.example_envs:os.system",
        "portal_shm.server.example_envs:np.load",
        "portal_shm.server.example_envs:NullEnv.__init__",
        "portal_shm.server.example_envs:NullEnv.__init__.__globals__",
        "portal_shm.server.example_envs:_private",
        "portal_shm.server:example_envs",
        "evil_on_import:Env",
    ],
)
def test_a_module_pattern_does_not_reach_through_dotted_attributes(hosts, keys, lair, tmp_path, env_id):
    """``--entry-points 'pkg.mod:*'``: '*' is one public name of that module, never ``os.system``."""
    marker = str(tmp_path / "pwned")
    assert_refused(hosts(*EXAMPLE_ENVS), keys, lair, "--entry-points", env_id, marker=marker, command=f"touch {marker}")


def test_the_example_envs_run_where_the_operator_allows_them(hosts, keys, lair):
    envs = remote(hosts(*EXAMPLE_ENVS), keys, "portal_shm.server.example_envs:NullEnv", 2, shape=(3,))
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()
    assert lair.untouched()


def test_a_module_that_acts_on_import_runs_only_where_the_operator_names_it(hosts, keys, tmp_path):
    """The flip side: the attacks above were refused by the policy, not spared by an import error."""
    own = Lair(tmp_path)
    host = hosts("--entry-points", "evil_on_import:*", lair=own)
    envs = remote(host, keys, "evil_on_import:Env", 1, shape=(2,))
    try:
        envs.reset(seed=0)
    finally:
        envs.close()
    assert not own.untouched()


# -- runtimes: interpreters, venvs, micromamba envs --------------------------------------------------

PROCESS_ATTACKS = [
    pytest.param({"python": "/bin/sh"}, "--python", id="python=/bin/sh"),
    pytest.param({"python": sys.executable}, "--python", id="python=this-interpreter-by-path"),
    pytest.param({"python": "../../../bin/sh"}, "--python", id="python=relative-path"),
    pytest.param({"python": "mine"}, "--python", id="python=a-name-the-host-lacks"),
    pytest.param({"runtime": "venv"}, "--runtimes", id="venv-runtime"),
    pytest.param({"runtime": "micromamba", "micromamba": "x"}, "--runtimes", id="micromamba-runtime"),
    pytest.param({"runtime_options": {"env": {"LD_PRELOAD": "/tmp/evil.so"}}}, "operator's to set", id="env-vars"),
    pytest.param({"runtime_options": {"cwd": "/"}}, "operator's to set", id="cwd"),
]


@pytest.mark.parametrize("options, text", PROCESS_ATTACKS)
def test_interpreters_are_picked_by_name_and_runtimes_by_the_operator(host, keys, lair, options, text):
    assert_refused(host, keys, lair, text, "CartPole-v1", **options)


@pytest.mark.parametrize("runtime", ["attach", "ray", "process; touch /tmp/x", ""])
def test_runtimes_no_host_has_are_refused(host, keys, lair, runtime):
    backend = RemoteBackend(hosts=[host.address], runtime=runtime, **keys.options())
    assert_refused(host, keys, lair, "--runtimes", "CartPole-v1", backend=backend)


def test_an_interpreter_the_operator_names_runs_and_paths_still_do_not(hosts, keys, lair):
    host = hosts("--python", f"mine={sys.executable}")
    envs = remote(host, keys, "CartPole-v1", 2, python="mine")
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        assert not any(sys.executable in server for server in envs.hosts[0]["servers"]), envs.hosts  # no host paths
        assert host.wait_for_log(f"python {sys.executable}", 5), host.log  # the host's log names it
    finally:
        envs.close()
    assert_refused(host, keys, lair, "offers mine (portal-shm host --python", "CartPole-v1", python=sys.executable)


VENV_RUNTIMES = ("--runtimes", "process,venv,micromamba")
VENV_ATTACKS = [
    pytest.param({"requirements": ["-r /etc/passwd"]}, "--agent-installs", id="requirements-file-option"),
    pytest.param({"requirements": ["--index-url=http://x"]}, "--agent-installs", id="index-url"),
    pytest.param({"requirements": ["gym==0.21"]}, "--agent-installs", id="a-package"),
    pytest.param({"requirements_file": "/etc/passwd"}, "operator's to set", id="requirements_file"),
    pytest.param({"runtime_options": {"cache_dir": "/"}}, "operator's to set", id="cache_dir"),
    pytest.param({"venv": "nope"}, "--venv", id="venv-the-host-lacks"),
    pytest.param({"venv": "nope", "requirements": ["gym"]}, "not both", id="venv-and-requirements"),
    pytest.param({"python": "/bin/sh"}, "--python", id="python-path"),
]


@pytest.mark.parametrize("options, text", VENV_ATTACKS)
def test_venvs_are_the_operators_and_agents_install_nothing(hosts, keys, lair, options, text):
    assert_refused(hosts(*VENV_RUNTIMES), keys, lair, text, "CartPole-v1", runtime="venv", **options)


@pytest.mark.parametrize(
    "options, text",
    [
        pytest.param({"micromamba": "x"}, "--micromamba", id="micromamba-the-host-lacks"),
        pytest.param({"runtime_options": {"spec": "/etc/passwd"}}, "operator's to set", id="spec"),
        pytest.param({"runtime_options": {"setup_script": "/tmp/x.sh"}}, "operator's to set", id="setup_script"),
    ],
)
def test_micromamba_envs_are_picked_by_name(hosts, keys, lair, options, text):
    assert_refused(hosts(*VENV_RUNTIMES), keys, lair, text, "CartPole-v1", runtime="micromamba", **options)


INSTALL_ATTACKS = [
    pytest.param("-r /etc/passwd", id="-r"),
    pytest.param("--index-url=http://x", id="--index-url"),
    pytest.param("-e .", id="-e"),
    pytest.param("/etc", id="absolute-path"),
    pytest.param("./pkg", id="relative-path"),
    pytest.param("~/pkg", id="home-path"),
    pytest.param("file:///etc", id="file-url"),
    pytest.param("gym\n-r /etc/passwd", id="newline"),
    pytest.param(["gym"] * 101, id="too-many"),
    pytest.param([["nested"]], id="not-a-string"),
]


@pytest.mark.parametrize("requirement", INSTALL_ATTACKS)
def test_agent_installs_name_packages_never_installer_options_or_host_paths(hosts, keys, lair, requirement):
    host = hosts("--runtimes", "process,venv", "--agent-installs")
    requirements = requirement if isinstance(requirement, list) else [requirement]
    text = "at most 100" if len(requirements) > 100 else "never installer options"
    assert_refused(host, keys, lair, text, "CartPole-v1", runtime="venv", requirements=requirements)


# -- docker: what containers of agents may and may not be ----------------------------------------------

DOCKER_ATTACKS = [
    pytest.param({"user": "0:0"}, "operator's to set", id="user-root"),
    pytest.param({"extra_run_args": [["volumes", {"/": {"bind": "/probe", "mode": "rw"}}]]}, "operator's", id="mount"),
    pytest.param({"extra_run_args": [["privileged", True]]}, "operator's to set", id="privileged"),
    pytest.param({"extra_run_args": [["devices", ["/dev/kmsg"]]]}, "operator's to set", id="devices"),
    pytest.param({"extra_run_args": [["network_mode", "host"]]}, "operator's to set", id="host-network"),
    pytest.param({"extra_run_args": [["cap_add", ["SYS_ADMIN"]]]}, "operator's to set", id="cap_add"),
    pytest.param({"extra_run_args": [["pid_mode", "host"]]}, "operator's to set", id="host-pids"),
    pytest.param({"ipc_host": True}, "operator's to set", id="ipc_host"),
    pytest.param({"read_only": False}, "operator's to set", id="writable-root"),
    pytest.param({"runtime_options": {"cache_dir": "/"}}, "operator's to set", id="cache_dir"),
    pytest.param({"mem_limit": "64g"}, "--max-mem", id="mem-over-cap"),
    pytest.param({"mem_limit": 5 * GIB}, "--max-mem", id="mem-bytes-over-cap"),
    pytest.param({"mem_limit": "lots"}, "not a memory size", id="mem-not-a-size"),
    pytest.param({"mem_limit": -1}, "not a memory size", id="mem-negative"),
    pytest.param({"cpus": 1000}, "--max-cpus", id="cpus-over-cap"),
    pytest.param({"cpus": 0}, "--max-cpus", id="cpus-zero"),
    pytest.param({"cpus": True}, "--max-cpus", id="cpus-bool"),
    pytest.param({"pids_limit": 10**6}, "--max-pids", id="pids-over-cap"),
    pytest.param({"pids_limit": -1}, "--max-pids", id="pids-unlimited"),
    pytest.param({"image": BASE}, "--images", id="unlabelled-image"),
    pytest.param({"image": "portal-shm/ale;touch /tmp/x"}, "is not an image name", id="image-shell"),
    pytest.param({"image": "--privileged"}, "is not an image name", id="image-option"),
    pytest.param({"image": "../../etc"}, "is not an image name", id="image-path"),
    pytest.param({"image": "portal-shm/no-such-image"}, "never pull", id="image-to-pull"),
]


@pytest.mark.parametrize("options, text", DOCKER_ATTACKS)
def test_containers_of_agents_keep_the_operators_confinement(docker_client, host, keys, lair, tmp_path, options, text):
    if options.get("image") == BASE:
        try:
            docker_client.images.get(BASE)
        except Exception:
            pytest.skip(f"{BASE} is not built here")
    options = {"image": ALE, **options}
    if "extra_run_args" in options and options["extra_run_args"][0][0] == "volumes":
        options["extra_run_args"] = [["volumes", {str(tmp_path): {"bind": "/probe", "mode": "rw"}}]]
    assert_refused(host, keys, lair, text, "ALE/Pong-v5", runtime="docker", **options)
    assert not host_containers(docker_client, host)


def test_an_allowed_container_runs_confined_with_the_default_caps(docker_client, host, keys):
    envs = remote(host, keys, "ALE/Pong-v5", 1, runtime="docker", image=ALE, max_episode_steps=30)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(1, np.int64))
        [container] = host_containers(docker_client, host)
        container.reload()
        config, limits = container.attrs["Config"], container.attrs["HostConfig"]
        assert config["User"] not in ("0", "0:0", "root", "") and not config["User"].startswith("0:")
        assert "ALL" in limits["CapDrop"] and not limits.get("CapAdd")
        assert limits["NetworkMode"] == "none"
        assert limits["ReadonlyRootfs"] is True and limits["Privileged"] is False
        assert "no-new-privileges" in limits["SecurityOpt"]
        assert limits["Memory"] == 4 * GIB  # --max-mem's default, given to an agent that asked for none
        assert limits["PidsLimit"] == 1024
        assert not limits.get("Devices")
        assert limits["IpcMode"] == "private" and limits["PidMode"] in ("", None)
        assert list(limits.get("Tmpfs") or {}) == ["/tmp"]
        [mount] = container.attrs["Mounts"]  # the portal's run directory, at the same path
        assert mount["Type"] == "bind" and mount["Source"] == mount["Destination"]
        assert os.path.commonpath([mount["Source"], tempfile.gettempdir()]) == tempfile.gettempdir()
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()
    assert eventually(lambda: not host_containers(docker_client, host)), host_containers(docker_client, host)


def test_an_image_the_operator_allows_passes_the_policy_and_fails_as_docker_does(docker_client, hosts, keys):
    try:
        docker_client.images.get(BASE)
    except Exception:
        pytest.skip(f"{BASE} is not built here")
    host = hosts("--images", "portal-shm/base*")
    with pytest.raises(portal_shm.PortalError, match="could not start a container") as info:
        remote(host, keys, "CartPole-v1", runtime="docker", image=BASE).close()
    assert not isinstance(info.value, portal_shm.errors.HostPolicyError)
    assert eventually(lambda: not host_containers(docker_client, host))


# -- kwargs: sizes, shapes, names -----------------------------------------------------------------------

DEEP: list = []
for _ in range(100):
    DEEP = [DEEP]

KWARGS_ATTACKS = [
    pytest.param({"vector_kwargs": {"ring_dpeth": 3}}, "'ring_dpeth' is not one an env host takes", id="typo"),
    pytest.param({"vector_kwargs": {"__class__": 1}}, "is not one an env host takes", id="vector-dunder"),
    pytest.param({"vector_kwargs": {"info_capacity": 2**40}}, "info_capacity=", id="info_capacity-1TB"),
    pytest.param({"vector_kwargs": {"ring_depth": 10**6}}, "ring_depth=", id="ring_depth-huge"),
    pytest.param({"vector_kwargs": {"startup_timeout": -1}}, "startup_timeout=", id="startup_timeout-negative"),
    pytest.param({"vector_kwargs": {"step_timeout": 0}}, "step_timeout=", id="step_timeout-zero"),
    pytest.param({"vector_kwargs": {"batch_size": 10**9}}, "batch_size=", id="batch_size-huge"),
    pytest.param({"vector_kwargs": {"envs_per_server": 0}}, "envs_per_server=", id="envs_per_server-zero"),
    pytest.param({"vector_kwargs": {"max_restarts": 10**9}}, "max_restarts=", id="max_restarts-huge"),
    pytest.param({"vector_kwargs": {"on_env_failure": "exec"}}, "on_env_failure=", id="on_env_failure-other"),
    pytest.param({"sutton_barto_reward": "x" * (1 << 20)}, "a hello takes at most 1,048,576", id="1MB-string"),
    pytest.param({"sutton_barto_reward": "x" * (1 << 19)}, "a host takes at most 65,536", id="512KB-string"),
    pytest.param({"sutton_barto_reward": DEEP}, "nests deeper than 8", id="100-deep-list"),
    pytest.param({"sutton_barto_reward": list(range(2000))}, "at most 1024", id="2000-entries"),
    pytest.param({"sutton_barto_reward": {1: 2}}, "keys must be strings", id="int-key"),
    pytest.param({"env_kwargs": {"__class__": 1}}, "is not a public Python name", id="dunder-key"),
    pytest.param({"env_kwargs": {"_np_random": 1}}, "is not a public Python name", id="private-key"),
    pytest.param({"env_kwargs": {"lambda": 1}}, "is not a public Python name", id="keyword-key"),
    pytest.param({"bogus": 1}, "--env-kwargs", id="undeclared-key"),
    pytest.param({"env_id": "Acrobot-v1"}, "--env-kwargs", id="env_id-of-an-env-that-takes-none"),
]


@pytest.mark.parametrize("kwargs, text", KWARGS_ATTACKS)
def test_vector_and_env_kwargs_are_bounded_plain_data_with_declared_names(host, keys, lair, kwargs, text, monkeypatch):
    # An agent that skips its own checks of the options (an honest one refuses them before it connects).
    monkeypatch.setattr("portal_shm.api._check_vector_kwargs", lambda vector_kwargs, allowed: dict(vector_kwargs or {}))
    monkeypatch.setattr(RemoteVectorPortal, "_checked_options", lambda self, n, vector: VectorOptions())
    assert_refused(host, keys, lair, text, "CartPole-v1", **kwargs)


@pytest.mark.parametrize(
    "env_id, text",
    [
        pytest.param("CartPole-v1; touch /tmp/x", "has characters no env id has", id="shell"),
        pytest.param("CartPole-v1\n", "has characters no env id has", id="newline"),
        pytest.param("x" * 300, "has characters no env id has", id="300-characters"),
        pytest.param("", "has characters no env id has", id="empty"),
        pytest.param("../../etc/passwd", "--envs", id="path"),
        pytest.param("NoSuchEnv-v0", "--plugins", id="unregistered"),
    ],
)
def test_env_ids_are_ids_of_the_hosts_registry(host, keys, lair, env_id, text):
    assert_refused(host, keys, lair, text, env_id)


def test_an_env_pattern_holds_for_the_env_id_a_preset_is_given(hosts, keys, lair):
    host = hosts("--envs", "CartPole-*")
    assert_refused(host, keys, lair, "--envs", "Acrobot-v1")
    assert_refused(host, keys, lair, "--envs", "ALE/Pong-v5")
    assert_refused(host, keys, lair, "--envs", "portal_shm.presets:atari", env_id="Acrobot-v1")
    envs = remote(host, keys, "CartPole-v1", 1)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()
    # allowed by the policy, wrong for the preset: the env's own error, not the policy's
    with pytest.raises(portal_shm.EnvError, match="frameskip") as info:
        remote(host, keys, "portal_shm.presets:atari", 1, env_id="CartPole-v1").close()
    assert not isinstance(info.value, portal_shm.errors.HostPolicyError)


def test_an_env_kwarg_the_operator_allows_reaches_the_env_which_may_refuse_it(hosts, keys, lair):
    host = hosts("--env-kwargs", "bogus")
    with pytest.raises(portal_shm.EnvError, match="unexpected keyword argument 'bogus'") as info:
        remote(host, keys, "CartPole-v1", 1, bogus=1).close()
    assert not isinstance(info.value, portal_shm.errors.HostPolicyError)
    assert_refused(host, keys, lair, "--env-kwargs", "CartPole-v1", other=1)
    assert_refused(host, keys, lair, "is not a public Python name", "CartPole-v1", env_kwargs={"_bogus": 1})


# -- call, get_attr, set_attr ---------------------------------------------------------------------------

CALL_ATTACKS = [
    pytest.param(lambda envs: envs.call("__init__"), "is not a public Python name", id="call-__init__"),
    pytest.param(lambda envs: envs.call("__class__"), "is not a public Python name", id="call-__class__"),
    pytest.param(lambda envs: envs.call("__reduce_ex__", 2), "is not a public Python name", id="call-__reduce_ex__"),
    pytest.param(lambda envs: envs.call("close.__globals__"), "is not a public Python name", id="call-dotted"),
    pytest.param(lambda envs: envs.get_attr("__dict__"), "is not a public Python name", id="get-__dict__"),
    pytest.param(lambda envs: envs.get_attr("_np_random"), "is not a public Python name", id="get-_np_random"),
    pytest.param(lambda envs: envs.set_attr("_np_random", [1]), "is not a public Python name", id="set-_np_random"),
    pytest.param(lambda envs: envs.set_attr("__class__", [1]), "is not a public Python name", id="set-__class__"),
    pytest.param(
        lambda envs: envs.call("get_wrapper_attr", "spec", **{"_secret": 1}),
        "call kwarg '_secret'",
        id="call-private-kwarg",
    ),
]


@pytest.mark.parametrize("attack, text", CALL_ATTACKS)
def test_call_get_attr_set_attr_reach_public_names_only_and_the_portal_keeps_stepping(host, keys, lair, attack, text):
    envs = remote(host, keys, "CartPole-v1", 1)
    try:
        envs.reset(seed=0)
        with pytest.raises(portal_shm.errors.HostPolicyError, match=re.escape(text)):
            attack(envs)
        obs, *_ = envs.step(np.zeros(1, np.int64))
        assert obs.shape == (1, 4)
        assert envs.get_attr("np_random_seed") == (0,)
    finally:
        envs.close()
    assert lair.untouched()


def test_a_calls_pattern_allows_exactly_the_names_it_matches(hosts, keys):
    host = hosts("--calls", "get_wrapper_attr,np_random_seed")
    envs = remote(host, keys, "CartPole-v1", 1, render_mode="rgb_array")
    try:
        envs.reset(seed=3)
        for attack in (
            lambda: envs.call("render"),
            lambda: envs.get_attr("spec"),
            lambda: envs.call("get_wrapper_attr", "spec"),  # the accessor reaches only names the patterns allow
        ):
            with pytest.raises(portal_shm.errors.HostPolicyError, match="--calls"):
                attack()
        assert envs.get_attr("np_random_seed") == (3,)
        assert envs.call("get_wrapper_attr", "np_random_seed") == (3,)
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()


# -- raw hellos: whatever the agent sends, the host answers and stays up ---------------------------------

NAMES = sorted(
    {*VECTOR_OPTIONS, *(n for names in AGENT_RUNTIME_OPTIONS.values() for n in names)}
    | {f.name for f in fields(DockerBackend)}
    | {"copy", "cache_dir", "requirements_file", "spec", "setup_script", "env", "cwd"}
    | {"max_episode_steps", "render_mode", "disable_env_checker", "sutton_barto_reward", "env_id"}
    | {"__class__", "__init__", "_np_random", "lambda", ""}
)
_text = st.text(st.characters(codec="utf-8"), max_size=12)
_keys = st.one_of(st.sampled_from(NAMES), _text)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    _text,
    st.binary(max_size=16),
    st.sampled_from(["NextStep", "rgb_array", "restart", "/bin/sh", "os:system", ALE, "CartPole-v1", "mine"]),
)
_plain = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)
_section = st.one_of(st.none(), st.just({}), st.dictionaries(_keys, _plain, max_size=4), _plain)
KINDS = {name for name, cls in vars(errors).items() if isinstance(cls, type) and issubclass(cls, errors.PortalError)}


@pytest.fixture(scope="module")
def fuzz_host(hosts):
    return hosts("--heartbeat-timeout", "2")


def test_random_hellos_are_answered_and_leave_the_host_serving(fuzz_host, keys):
    import zmq
    import zmq.auth

    public, secret = zmq.auth.load_certificate(keys.agent)
    server, _ = zmq.auth.load_certificate(keys.host_key)
    context = zmq.Context()
    since, sent, answers = len(fuzz_host.log), [0], {"welcome": 0, "error": 0}

    @settings(
        max_examples=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(options=_section, vector=_section, env_kwargs=_section)
    def one_hello(options, vector, env_kwargs):
        socket = context.socket(zmq.DEALER)  # a fresh identity: a session is per identity
        socket.setsockopt(zmq.ROUTING_ID, secrets.token_bytes(12))
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
        socket.setsockopt(zmq.CURVE_SERVERKEY, server)
        socket.connect(fuzz_host.address)
        try:
            hello = {
                "cmd": "hello",
                "protocol": frames.PROTOCOL,
                "seq": 1,
                "env_id": "CartPole-v1",
                "runtime": "process",
                "num_envs": 1,
                "runtime_options": options,
                "vector": vector,
                "env_kwargs": env_kwargs,
            }
            socket.send_multipart(frames.pack(hello))
            sent[0] += 1
            assert socket.poll(30_000), "the host answers every hello"
            header, _ = frames.unpack(socket.recv_multipart())
            assert header["cmd"] in ("welcome", "error"), header
            answers[header["cmd"]] += 1
            if header["cmd"] == "error":
                assert header.get("kind") in KINDS, header
                if header["kind"] not in ("EnvError", "EnvNotFoundError"):  # an env's own traceback is fine
                    assert "remote_traceback" not in header, header["remote_traceback"]
            else:
                socket.send_multipart(frames.pack({"cmd": "close", "seq": 2, "ack": header["seq"]}))
                assert socket.poll(10_000), "the host answers a close"
                reply, _ = frames.unpack(socket.recv_multipart())
                assert reply["cmd"] == "result" and reply.get("re") == 2, reply
            assert fuzz_host.process.poll() is None
        finally:
            socket.close()

    try:
        one_hello()
    finally:
        context.term()
    assert answers["error"] > 0, answers
    # every session ended (a welcomed one by its close), its envs with it
    assert eventually(lambda: len(ENDED.findall(fuzz_host.log, since)) == sent[0], 15), fuzz_host.log[since:]
    assert eventually(lambda: not children(fuzz_host.process.pid)), children(fuzz_host.process.pid)
    assert fuzz_host.process.poll() is None
    log = fuzz_host.log[since:]
    assert not FAILED.search(log) and not host_errors(log), log


# -- holes this playbook found, closed -------------------------------------------------------------------


@pytest.mark.parametrize("attack", ["vizdoom_path", "game_args"])
def test_vizdoom_config_kwargs_do_not_run_or_write_anything_on_the_host(host, keys, lair, tmp_path, attack):
    pytest.importorskip("vizdoom")
    marker = str(tmp_path / "pwned")
    if attack == "vizdoom_path":  # any executable the host has; a script here, to see that it ran
        script = tmp_path / "payload.sh"
        script.write_text(f'#!/bin/sh\necho "$@" > {marker}\n')  # (its arguments: the engine's)
        script.chmod(0o755)
        kwargs = {"vizdoom_path": str(script)}
    else:
        kwargs = {"game_args": f"+logfile {marker} +echo pwned"}
    refusal = None
    try:
        envs = remote(host, keys, "VizdoomBasic-v1", 1, **kwargs)
        try:
            envs.reset(seed=0)  # the engine starts here
        finally:
            envs.close()
    except portal_shm.PortalError as exc:  # (a script is no engine: its env server dies once it ran)
        refusal = exc
    assert eventually(lambda: not children(host.process.pid))
    if attack == "vizdoom_path" and os.path.exists(marker):  # the queues of an engine that never came
        for instance in re.findall(r"\+viz_instance_id (\S+)", (tmp_path / "pwned").read_text()):
            for queue in glob.glob(f"/dev/shm/ViZDoomMQ*{instance}"):
                os.unlink(queue)
    assert not os.path.exists(marker), "the agent ran a program or wrote a file on the host"
    assert isinstance(refusal, portal_shm.errors.HostPolicyError), refusal


def test_a_memory_limit_that_rounds_to_zero_is_not_a_container_without_limit(docker_client, host, keys):
    try:
        envs = remote(host, keys, "ALE/Pong-v5", 1, runtime="docker", image=ALE, mem_limit="0.5b")
    except portal_shm.errors.HostPolicyError:
        return
    try:
        [container] = host_containers(docker_client, host)
        assert 0 < container.attrs["HostConfig"]["Memory"] <= 4 * GIB
    finally:
        envs.close()
        assert eventually(lambda: not host_containers(docker_client, host))


@pytest.mark.parametrize("cpus", [None, 1e-10])
def test_a_cpu_limit_that_is_none_or_rounds_to_zero_is_not_a_container_without_limit(docker_client, hosts, keys, cpus):
    host = hosts("--max-cpus", "1")
    try:
        envs = remote(host, keys, "ALE/Pong-v5", 1, runtime="docker", image=ALE, cpus=cpus)
    except portal_shm.errors.HostPolicyError:
        return
    try:
        [container] = host_containers(docker_client, host)
        assert 0 < container.attrs["HostConfig"]["NanoCpus"] <= 1e9
    finally:
        envs.close()
        assert eventually(lambda: not host_containers(docker_client, host))


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(lambda envs: envs.call("get_wrapper_attr", "_np_random_seed"), id="get_wrapper_attr"),
        pytest.param(lambda envs: envs.call("set_wrapper_attr", "_max_episode_steps", 1), id="set_wrapper_attr"),
    ],
)
def test_private_attributes_are_out_of_reach_through_the_wrapper_accessors(host, keys, attack):
    envs = remote(host, keys, "CartPole-v1", 1)
    try:
        envs.reset(seed=0)
        with pytest.raises(portal_shm.errors.HostPolicyError):
            attack(envs)
    finally:
        envs.close()


def test_a_refused_hello_raises_without_a_five_second_wait(host, keys):
    started = time.monotonic()
    with pytest.raises(portal_shm.errors.HostPolicyError):
        remote(host, keys, "os:system", command="true")
    assert time.monotonic() - started < 2.0


def test_nothing_the_playbook_named_was_ever_imported_on_any_host(hosts, lair):
    assert lair.untouched()
    for host in hosts.started.values():
        assert host.process.poll() is None, host.log
