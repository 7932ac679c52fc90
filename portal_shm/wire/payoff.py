"""Whether spinning pays: the odds that what a waiter waits for comes within its spin budget.

The agent keeps one for its servers' results (``agent/local/spin.py``), each server one for its
agent's next command (``server/loop.py``). Python 3.9 syntax: servers run it in env runtimes.
"""

from __future__ import annotations

_WEIGHT = 0.125  # the weight of the newest wait: about the last eight count


class SpinPayoff:
    """The odds that what a waiter waits for comes within ``budget`` seconds.

    Every wait counts: a spin that saw it is a hit, one that ran out (or found no idle core to spin
    on) a miss, and a sleep woken within the budget a hit too (a spin would have seen it). The
    waiter spins while at least half of the recent waits were hits; sleeps keep measuring, so it
    spins again once answers come quickly again.
    """

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.odds = 1.0

    def worth_it(self) -> bool:
        return self.budget > 0 and self.odds >= 0.5

    def spun(self, hit: bool) -> None:
        self.odds += _WEIGHT * (float(hit) - self.odds)

    def slept(self, waited: float) -> None:
        """The waiter slept ``waited`` seconds, without spinning first, until the answer came."""
        self.odds += _WEIGHT * (float(waited <= self.budget) - self.odds)
