"""pytest plugin: TorchRL's gymnasium vector-env tests run on the envs they name, not skipped.

``TestGym.test_vecenvs_wrapper`` and ``test_vecenvs_env`` (test/libs/test_gym.py) are defined
four times under ``torchrl._utils.implement_for`` (gymnasium >= 1.1, gymnasium < 1.0, gym >= 0.18,
gym < 0.18); pytest keeps the parametrization of the last definition, gym's short names ``"cp"``
and ``"hc"``, while ``implement_for`` calls the gymnasium variant, which skips on them ("Short env
name 'cp' not valid for gymnasium"). So under gymnasium both tests are always skipped, in
TorchRL's own CI as here. This plugin gives those items the names the gym variant itself resolves
them to and the gymnasium variant lists (``"CartPole-v1"``, ``"HalfCheetah-v4"``); the test bodies
are unchanged. Loaded in both modes of ``run_torchrl_gym_suite.py``, so the baseline runs the same
tests.
"""

from __future__ import annotations

import importlib.util

SHORT_NAMES = {"cp": "CartPole-v1", "hc": "HalfCheetah-v4"}
TESTS = {"test_vecenvs_wrapper", "test_vecenvs_env"}


def pytest_collection_modifyitems(session: object, config: object, items: list) -> None:
    if importlib.util.find_spec("gymnasium") is None:  # gym's variant resolves the short names itself
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "originalname", None) in TESTS and callspec is not None:
            name = callspec.params.get("envname")
            if name in SHORT_NAMES:
                callspec.params["envname"] = SHORT_NAMES[name]


def pytest_report_header(config: object) -> str:
    return f"test_vecenvs_wrapper/test_vecenvs_env: gym's short env names resolved for gymnasium {SHORT_NAMES}"
