"""A server's config travels as a private file whose path is the environment variable's value
(``portal_shm/wire/launch.py``): any size up to the cap starts a server, the file is 0600 and gone
once read, configs inline in the variable (older runtimes, servers started by hand) still read,
and a config over the cap is refused before anything starts, by server, size and env kwarg."""

import glob
import os
import stat
import tempfile

import numpy as np
import pytest

import portal_shm
from portal_shm.errors import ConfigTooLargeError
from portal_shm.runtimes.backend import ServerLaunch
from portal_shm.runtimes.config_file import write_launch_config
from portal_shm.wire.launch import MAX_CONFIG_BYTES, decode_config, encode_config

PAYLOAD_ENV = "portal_shm.server.example_envs:PayloadEnv"


def _launch(directory: str, config: dict) -> ServerLaunch:
    return ServerLaunch(3, [0], config, directory, os.path.join(directory, "server-3.log"))


def test_a_config_of_megabytes_travels_as_a_0600_file_read_once(tmp_path):
    config = {"env": {"id": "x", "kwargs": {"table": list(range(300_000)), "blob": b"\x01" * (1 << 20)}}, "t": (1, 2)}
    value = write_launch_config(_launch(str(tmp_path), config))
    assert len(value) < 4096  # what goes in the environment: a path, whatever the config's size
    (path,) = glob.glob(str(tmp_path / "config-*"))
    assert value == "file:" + path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert decode_config(value) == config
    assert not os.path.exists(path)  # the server removed it as it read it


def test_configs_inline_in_the_variable_still_read():
    config = {"env": {"id": "CartPole-v1", "kwargs": {"x": (1, 2)}}, "server_index": 0}
    assert decode_config(encode_config(config)) == config
    assert decode_config('{"server_index": 0}') == {"server_index": 0}


def test_a_config_over_the_cap_is_refused_naming_the_server_its_size_and_largest_kwarg(tmp_path):
    config = {"env": {"id": "x", "kwargs": {"small": 1, "table": b"\x00" * (MAX_CONFIG_BYTES + 1)}}}
    with pytest.raises(ConfigTooLargeError) as caught:
        write_launch_config(_launch(str(tmp_path), config))
    text = str(caught.value)
    assert "env server 3 packs to 64.0 MiB" in text and "env_kwargs['table'] alone is 64.0 MiB" in text, text
    assert "over the 64.0 MiB" in text and "by reference" in text, text
    assert os.listdir(tmp_path) == []  # nothing written


def test_make_vec_refuses_env_kwargs_over_the_cap_before_a_server_starts_and_leaves_nothing():
    run_dirs = os.path.join(tempfile.gettempdir(), f"psm-{os.getpid()}-*")
    before = set(glob.glob(run_dirs))
    with pytest.raises(ConfigTooLargeError, match=r"env server 0 packs to 65\.0 MiB \(env_kwargs\['payload'\]"):
        portal_shm.make_vec(PAYLOAD_ENV, 2, payload=np.zeros(65 << 20, np.uint8).tobytes())
    assert set(glob.glob(run_dirs)) == before
