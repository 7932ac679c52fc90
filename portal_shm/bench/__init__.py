"""``portal-shm bench``: portal_shm side by side with gymnasium's vector envs, envpool and
portal-env, on a noisy shared machine.

Modules, one idea each: ``scenarios`` (what is stepped), ``systems`` (+ ``envpool_system``,
``portal_env_system``: what steps it), ``ceiling`` (raw speed and the N-core ceiling),
``measure`` (timed runs, CPU share, allocations), ``stats`` (medians, pair-by-pair ratios),
``runner`` (interleaved cells), ``load`` (other work on the machine meanwhile), ``cheap_env``
(envs too cheap to rank runners by more than their transports), ``report``/``machine`` (the JSON
and its schema), ``table``, ``plot``, ``live`` (what people see), ``cli`` (the verb).

Library use::

    from portal_shm.bench import BenchOptions, parse_scenarios, run_bench
    report = run_bench(BenchOptions(parse_scenarios(["null:84x84x4"]), num_envs=[8], against=["async"]))
"""

from .options import BenchOptions
from .runner import BenchError, run_bench
from .scenarios import Scenario, ScenarioError, parse_scenario, parse_scenarios

__all__ = ["BenchError", "BenchOptions", "Scenario", "ScenarioError", "parse_scenario", "parse_scenarios", "run_bench"]
