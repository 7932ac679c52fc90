"""One set of option checks (``VectorOptions``) for the local portal, the remote agent and the env host."""

import pytest

import portal_shm
from portal_shm.agent.contract.options import HOST_BOUNDS, HOSTED, VectorOptions
from portal_shm.errors import HostPolicyError
from portal_shm.remote.host.request_values import check_vector_options

BAD = [
    pytest.param({"ring_depth": 1}, "ring_depth=1: give an integer", id="ring_depth"),
    pytest.param({"autoreset_mode": "Sometimes"}, "autoreset_mode='Sometimes': give one of 'NextStep'", id="mode"),
    pytest.param({"on_env_failure": "retry"}, "on_env_failure='retry': give one of 'raise', 'restart'", id="policy"),
    pytest.param({"step_timeout": 0}, "step_timeout=0: give seconds above 0", id="step_timeout"),
    pytest.param({"max_restarts": -1}, "max_restarts=-1: give an integer", id="max_restarts"),
    pytest.param({"batch_size": 9}, "batch_size=9: give an integer from 1 to 4", id="batch_size"),
    pytest.param({"recycle": {"episodes": 0}}, "recycle=", id="recycle"),
    pytest.param({"batch_size": 2, "autoreset_mode": "Disabled"}, "batch_size needs autoreset", id="batches-disabled"),
    pytest.param(
        {"batch_size": 2, "recycle": {"episodes": 5}}, "recycle is for lockstep portals", id="batches-recycle"
    ),
]


@pytest.mark.parametrize("options, text", BAD)
def test_every_kind_refuses_a_bad_option_with_the_same_words(options, text):
    with pytest.raises(ValueError, match=text):
        portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=options)  # before any server starts
    with pytest.raises(ValueError, match=text):  # the remote agent: before it reaches any host
        portal_shm.make_vec(
            "CartPole-v1", 4, backend="remote", hosts=["tcp://127.0.0.1:9"], insecure=True, vector_kwargs=options
        )
    with pytest.raises(HostPolicyError, match=text):  # an env host, whatever an agent skipped
        check_vector_options(options, 4)


def test_the_host_bounds_what_makes_it_allocate_and_refuses_what_it_does_not_apply():
    VectorOptions.of(4, {"ring_depth": 64})  # a portal of one's own may
    with pytest.raises(HostPolicyError, match="ring_depth=64: give an integer from 2 to 16"):
        check_vector_options({"ring_depth": 64}, 4)
    with pytest.raises(HostPolicyError, match="'spin_wait' is not one an env host takes"):
        check_vector_options({"spin_wait": 0.0}, 4)
    assert set(HOSTED) < set(VectorOptions.__dataclass_fields__) and HOST_BOUNDS.ring_depth == 16
