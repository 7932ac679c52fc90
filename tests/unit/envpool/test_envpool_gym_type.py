"""``portal_shm.envpool``'s gym type gives the ``gym`` package's space classes, as envpool 0.x did.

Checked here: every gymnasium space with a gym counterpart converts to it with the same bounds,
sizes, keys and sampling generator; a space without one is refused by name; the pool's spaces are
gym's where gym imports and gymnasium's where it does not (not installed: quietly; installed but
broken: with a warning saying why); the gym type's values and 4-tuple are unchanged by the classes.
The tests that need gym skip without it (it is not in the dev extra: gym 0.26.2 is an sdist that
says at import that it does not support numpy 2).
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import gymnasium
import numpy as np
import pytest

from portal_shm.envpool.gym_spaces import import_gym, to_gym

G = gymnasium.spaces
BOX_F32 = G.Box(np.array([-1.0, -np.inf], np.float32), np.array([2.0, np.inf], np.float32), dtype=np.float32)
SPACES = {
    "box_uint8": G.Box(0, 255, (4, 84, 84), np.uint8),
    "box_float_unbounded": BOX_F32,
    "box_int64": G.Box(-3, 7, (2, 3), np.int64),
    "discrete": G.Discrete(6),
    "discrete_start": G.Discrete(3, start=-1),
    "multi_discrete": G.MultiDiscrete([[2, 3], [4, 5]], dtype=np.int32),
    "multi_binary": G.MultiBinary(5),
    "multi_binary_shape": G.MultiBinary([2, 3]),
    "tuple": G.Tuple((G.Discrete(2), BOX_F32)),
    "dict_nested": G.Dict({"z": G.Discrete(4), "a": G.Dict({"m": G.MultiBinary(2), "b": BOX_F32})}),
    "text": G.Text(8, min_length=2, charset="abc"),
    "sequence": G.Sequence(G.Discrete(3)),
}


def gym_or_skip():
    return pytest.importorskip("gym", reason="gym is not installed (pip install gym==0.26.2): nothing to convert to")


def assert_same(original, converted, gym):
    """``converted`` is gym's class of the same name, with ``original``'s parameters, recursively."""
    assert type(converted).__module__.startswith("gym.spaces.") and type(converted).__name__ == type(original).__name__
    assert isinstance(converted, getattr(gym.spaces, type(original).__name__))
    if isinstance(original, (G.Box, G.MultiDiscrete, G.MultiBinary, G.Discrete)):
        assert converted.shape == original.shape and converted.dtype == original.dtype
    if isinstance(original, G.Box):
        np.testing.assert_array_equal(converted.low, original.low)
        np.testing.assert_array_equal(converted.high, original.high)
    elif isinstance(original, G.Discrete):
        assert (converted.n, converted.start) == (original.n, original.start)
    elif isinstance(original, G.MultiDiscrete):
        np.testing.assert_array_equal(converted.nvec, original.nvec)
    elif isinstance(original, G.MultiBinary):
        assert np.array_equal(converted.n, original.n)
    elif isinstance(original, G.Tuple):
        assert len(converted.spaces) == len(original.spaces)
        for a, b in zip(original.spaces, converted.spaces):
            assert_same(a, b, gym)
    elif isinstance(original, G.Dict):
        assert list(converted.spaces) == list(original.spaces)  # gymnasium's key order, not sorted
        for key in original.spaces:
            assert_same(original.spaces[key], converted.spaces[key], gym)
    elif isinstance(original, G.Text):
        assert (converted.min_length, converted.max_length) == (original.min_length, original.max_length)
        assert converted.character_set == original.character_set
    elif isinstance(original, G.Sequence):
        assert_same(original.feature_space, converted.feature_space, gym)


@pytest.mark.parametrize("name", list(SPACES))
def test_gymnasium_spaces_convert_to_gyms_classes_with_the_same_parameters(name):
    gym = gym_or_skip()
    original = SPACES[name]
    original.seed(11)
    converted = to_gym(original, gym)
    assert_same(original, converted, gym)
    for _ in range(5):
        assert converted.contains(original.sample())
        assert original.contains(converted.sample())


@pytest.mark.parametrize("name", ["discrete", "discrete_start", "multi_discrete", "multi_binary"])
def test_a_converted_space_draws_what_the_original_would_have_drawn(name):
    gym = gym_or_skip()
    original = SPACES[name]
    original.seed(5)
    original.sample()  # the generator is mid-stream: its state is what is copied, not a seed
    converted = to_gym(original, gym)
    draws = [converted.sample() for _ in range(20)]
    np.testing.assert_array_equal(draws, [original.sample() for _ in range(20)])


@pytest.mark.parametrize(
    "space, match",
    [
        (G.OneOf((G.Discrete(2), G.Discrete(3))), "gymnasium.spaces.oneof.OneOf"),
        (G.MultiDiscrete([2, 3], start=[1, 0]), "start=\\[1, 0\\]"),
        (G.Sequence(G.Discrete(3), stack=True), "stack=True"),
        (G.Graph(G.Box(0.0, 1.0, (2,)), G.Discrete(3)), "GraphInstance"),
        (G.Dict({"x": G.OneOf((G.Discrete(2),))}), "OneOf"),
    ],
)
def test_spaces_without_a_gym_counterpart_are_refused_by_name(space, match):
    gym = gym_or_skip()
    with pytest.raises(TypeError, match=f"no counterpart in gym {gym.__version__}'s spaces: .*{match}"):
        to_gym(space, gym)


def run_python(code, **env):
    """``code`` in a fresh interpreter (so imports and sys.modules start clean); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_gym_the_import_gives_none_quietly():
    out = run_python(
        """
        import sys, warnings
        sys.modules["gym"] = None  # gym not importable, as where it is not installed
        warnings.simplefilter("error")
        from portal_shm.envpool.gym_spaces import import_gym
        print(import_gym())
        """
    )
    assert out.strip() == "None"


def test_a_gym_that_fails_to_import_falls_back_with_a_warning_naming_why(tmp_path):
    broken = tmp_path / "gym"
    broken.mkdir()  # a gym whose import fails as an install missing one of its dependencies does
    (broken / "__init__.py").write_text("import cloudpickle_that_is_not_installed\n")
    out = run_python(
        """
        import warnings
        from portal_shm.envpool.gym_spaces import import_gym
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(import_gym())
        print(caught[0].category.__name__, caught[0].message)
        """,
        PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    )
    assert out.startswith("None\nRuntimeWarning env_type='gym': the gym package is installed but its import failed")
    assert "ModuleNotFoundError: No module named 'cloudpickle_that_is_not_installed'" in out
    assert "gymnasium's classes" in out


def test_the_gym_type_gives_gyms_space_classes_as_envpool_did():
    gym = gym_or_skip()
    pytest.importorskip("ale_py")
    import portal_shm.envpool as envpool

    envs = envpool.make("Pong-v5", env_type="gym", num_envs=2)
    try:
        for space in (envs.action_space, envs.single_action_space, envs.spec.action_space):
            assert isinstance(space, gym.spaces.Discrete) and space.n == 6
        for space in (envs.observation_space, envs.single_observation_space, envs.spec.observation_space):
            assert isinstance(space, gym.spaces.Box)
            assert space.shape == (4, 84, 84) and space.dtype == np.uint8 and space.high.max() == 255
    finally:
        envs.close()
    envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=1)  # the gymnasium type is unchanged
    try:
        assert isinstance(envs.action_space, gymnasium.spaces.Discrete)
        assert isinstance(envs.observation_space, gymnasium.spaces.Box)
    finally:
        envs.close()


def test_the_gym_type_steps_as_before_whatever_the_space_classes():
    """The same seed gives the same 4-tuples as the gymnasium type's 5-tuples merged; the action
    space seeded alike draws alike."""
    gym = gym_or_skip()
    pytest.importorskip("ale_py")
    import portal_shm.envpool as envpool

    old = envpool.make("Breakout-v5", env_type="gym", num_envs=2, seed=4, episodic_life=True, reward_clip=True)
    new = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=2, seed=4, episodic_life=True, reward_clip=True)
    try:
        assert isinstance(old.action_space, gym.spaces.Discrete)
        old.action_space.seed(9), new.action_space.seed(9)
        obs = old.reset()
        assert isinstance(obs, np.ndarray)
        np.testing.assert_array_equal(obs, new.reset()[0])
        for _ in range(60):
            actions = np.array([old.action_space.sample() for _ in range(2)])
            np.testing.assert_array_equal(actions, [new.action_space.sample() for _ in range(2)])
            result = old.step(actions)
            obs, reward, terminated, truncated, info = new.step(actions)
            assert len(result) == 4
            np.testing.assert_array_equal(result[0], obs)
            np.testing.assert_array_equal(result[1], reward)
            np.testing.assert_array_equal(result[2], terminated | truncated)
            np.testing.assert_array_equal(result[3]["TimeLimit.truncated"], truncated)
            for key in ("lives", "reward", "terminated", "elapsed_step", "env_id"):
                np.testing.assert_array_equal(result[3][key], info[key])
    finally:
        old.close()
        new.close()


def test_without_gym_the_gym_type_keeps_gymnasiums_classes():
    pytest.importorskip("ale_py")
    out = run_python(
        """
        import sys, warnings
        sys.modules["gym"] = None
        warnings.simplefilter("error")
        import numpy as np
        import portal_shm.envpool as envpool
        envs = envpool.make("Pong-v5", env_type="gym", num_envs=1)
        try:
            obs = envs.reset()
            result = envs.step(np.zeros(1, np.int64))
            print(type(envs.action_space).__module__, type(envs.observation_space).__module__, len(result))
        finally:
            envs.close()
        """
    )
    assert out.split() == ["gymnasium.spaces.discrete", "gymnasium.spaces.box", "4"]


def test_import_gym_gives_the_package_where_it_is_installed():
    gym = gym_or_skip()
    assert import_gym() is gym


def load_cleanrl_runner():
    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "compat", "run_cleanrl_envpool.py")
    spec = importlib.util.spec_from_file_location("run_cleanrl_envpool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cleanrl_runner_changes_the_one_import_line_and_nothing_else():
    runner = load_cleanrl_runner()
    source = "import os\r\nimport envpool\r\nimport gym\r\n\r\nx = 'import envpool'\r\n"
    changed = runner.with_portal_import(source, "ppo.py")
    assert changed == source.replace("\r\nimport envpool\r\n", "\r\nimport portal_shm.envpool as envpool\r\n", 1)
    for wrong, count in [("import gym\n", 0), ("import envpool as ep\n", 0), ("import envpool\nimport envpool\n", 2)]:
        with pytest.raises(SystemExit, match=f"ppo.py has {count} lines that read exactly 'import envpool'"):
            runner.with_portal_import(wrong, "ppo.py")


def test_the_cleanrl_runner_runs_the_changed_copy_with_the_scripts_arguments(tmp_path):
    runner = load_cleanrl_runner()
    missing = [module for module in runner.NEEDED if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"the runner needs what cleanrl's script imports: {', '.join(missing)} not installed")
    script = tmp_path / "ppo_atari_envpool.py"
    script.write_text(
        "import sys\nimport envpool\nprint(envpool.__name__, __file__.endswith('/ppo_atari_envpool.py'), sys.argv[1:])\nsys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, runner.__file__, str(script), "--workdir", str(tmp_path / "work"), "--num-envs", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[-1] == "portal_shm.envpool True ['--num-envs', '4']"
    assert (tmp_path / "work").is_dir()
