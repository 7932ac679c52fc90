"""Which of make_vec's keyword arguments are the backend's and which the env's (``env_arguments.py``):
a name close to an option is refused only where the agent knows the env does not take it."""

import re
import sys
import warnings

import gymnasium as gym
import pytest

from portal_shm.agent.contract.env_arguments import ANY, env_keywords, split_kwargs

DOCKER = {"image", "mem_limit", "cpus", "pids_limit", "extra_run_args", "read_only", "ipc_host", "user"}
VECTOR = ("copy", "batch_size", "ring_depth")


class Plain(gym.Env):
    def __init__(self, size=1, imag=None):
        pass


def anything(**kwargs):
    return Plain()


def test_what_the_agent_knows_of_an_env_without_starting_it():
    cartpole = env_keywords("CartPole-v1")  # spec kwargs, gymnasium.make's own, the entry point's parameters
    assert {"render_mode", "sutton_barto_reward", "max_episode_steps", "disable_env_checker"} <= cartpole
    assert env_keywords(f"{__name__}:Plain") == {"size", "imag"}  # (this module is imported)
    assert env_keywords(f"{__name__}:anything") is ANY
    assert env_keywords("not_imported_anywhere_module:Env") is None  # never imported to find out
    assert "not_imported_anywhere_module" not in sys.modules
    assert env_keywords("NoSuchEnv-v0") is None  # registered only in some runtime, perhaps


def test_options_by_name_and_far_names_need_no_knowledge_of_the_env():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options, env = split_kwargs("x.y:Z", "docker", DOCKER, VECTOR, {"image": "i", "frameskip": 4, "g": 9.8})
    assert options == {"image": "i"} and env == {"frameskip": 4, "g": 9.8}


@pytest.mark.parametrize(
    "name, meant",
    [("imag", "image= (an option of the 'docker' backend)"), ("cpu", "cpus="), ("batchsize", "'batch_size'")],
)
def test_a_name_close_to_an_option_that_the_env_does_not_take_is_refused(name, meant):
    with pytest.raises(TypeError, match=rf"{name}= is neither .*did you mean .*{re.escape(meant)}"):
        split_kwargs("CartPole-v1", "docker", DOCKER, VECTOR, {name: 1})


def test_a_name_close_to_an_option_goes_to_an_env_that_takes_it_or_cannot_be_told():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert split_kwargs(f"{__name__}:Plain", "docker", DOCKER, VECTOR, {"imag": 1})[1] == {"imag": 1}
        assert split_kwargs(f"{__name__}:anything", "docker", DOCKER, VECTOR, {"cpu": 1})[1] == {"cpu": 1}
    with pytest.warns(
        UserWarning, match=r"imag= goes to the env 'NotRegisteredHere/Game-v5', though it looks like image="
    ):
        assert split_kwargs("NotRegisteredHere/Game-v5", "docker", DOCKER, VECTOR, {"imag": 1})[1] == {"imag": 1}
