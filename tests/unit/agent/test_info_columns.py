"""A native server's infos as columns (one blob for all its envs, ``server/native.py`` ``Columns``):
the agent batches them into what gymnasium's per-env batching gives, refuses columns a server
may not send (masks, finals, nested or non-number values, another length, another env's row), and
an agent that does not read columns gets the same infos env by env."""

from types import SimpleNamespace

import numpy as np
import pytest

from portal_shm.agent.contract.infos import add_info
from portal_shm.agent.contract.validate import decode_infos
from portal_shm.agent.local.ring_views import RingViews
from portal_shm.errors import ServerProtocolError
from portal_shm.server.native import Columns
from portal_shm.wire import protocol as P

COLUMNS = {"lives": [3, 2, 0], "reward": [0.0, 1.0, -1.0], "terminated": [0, 0, 1]}


def _add(infos, columns, env, envs, first=-1, total=8, raw=False):
    return RingViews.add_columns(SimpleNamespace(raw_infos=raw), infos, columns, env, envs, first, total)


def _per_env(columns, envs, positions, total=8, extras=None):
    infos = {}
    for j, position in enumerate(positions):
        for info in Columns(columns, extras).per_env(len(envs))[j]:
            infos = add_info(infos, info, position, total)
    return infos


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
        assert a[key].dtype == b[key].dtype, key


@pytest.mark.parametrize("envs, first", [([2, 3, 4], -1), ([5, 6, 7], 0), ([0, 2, 4], -1)])
def test_columns_batch_as_each_envs_dict_would(envs, first):
    positions = envs if first < 0 else range(first, first + len(envs))
    _assert_same(_add({}, COLUMNS, envs[0], envs, first), _per_env(COLUMNS, envs, positions))


def test_columns_join_infos_other_servers_wrote_before():
    before = add_info({}, {"lives": 5, "other": 1.5}, 0, 8)
    got = _add(before, COLUMNS, 2, [2, 3, 4])
    assert got["lives"].tolist() == [5, 0, 3, 2, 0, 0, 0, 0]
    assert got["_lives"].tolist() == [True, False, True, True, True, False, False, False]
    assert got["other"][0] == 1.5 and got["_other"].tolist() == [True] + [False] * 7
    assert got["reward"].tolist()[2:5] == [0.0, 1.0, -1.0]


def test_an_agent_without_columns_gets_the_same_infos_env_by_env():
    extras = {1: [{"final_obs": np.zeros(2), "final_info": {}}]}
    rows = Columns(COLUMNS, extras).per_env(3)
    assert rows[0] == [{"lives": 3, "reward": 0.0, "terminated": 0}]
    assert rows[1][0]["final_info"] == {} and rows[1][1] == {"lives": 2, "reward": 1.0, "terminated": 0}


def test_decode_takes_columns_beside_an_envs_own_infos():
    infos, var_obs, columns = decode_infos(P.packb([[{"x": 1}], None, COLUMNS]), 2)
    assert infos == [{"x": 1}] and var_obs is None and columns == COLUMNS
    assert decode_infos(P.packb([[{"x": 1}], None]), 2)[2] is None


@pytest.mark.parametrize(
    "columns",
    [
        {"_lives": [1, 2, 3]},  # a mask: the agent makes those
        {"final_obs": [1, 2, 3]},
        {"lives": [[1], [2], [3]]},  # not plain numbers
        {"lives": "123"},
        {3: [1, 2, 3]},
        [1, 2, 3],
    ],
)
def test_columns_a_server_may_not_send_are_refused(columns):
    with pytest.raises(ServerProtocolError, match="unexpected shape"):
        decode_infos(P.packb([[], None, columns]), 0)


def test_columns_of_another_length_or_from_another_row_are_refused():
    with pytest.raises(ServerProtocolError, match="another length"):
        _add({}, {"lives": [1, 2]}, 2, [2, 3, 4])
    with pytest.raises(ServerProtocolError, match="not the first"):
        _add({}, COLUMNS, 3, [2, 3, 4])
    with pytest.raises(ServerProtocolError, match="not the first"):
        _add({}, COLUMNS, 0, None)
    with pytest.raises(ServerProtocolError, match="cannot be batched"):
        _add({"lives": {"nested": np.zeros(8)}}, COLUMNS, 2, [2, 3, 4])
