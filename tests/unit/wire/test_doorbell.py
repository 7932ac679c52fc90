"""Doorbells with spin-then-sleep: words of the ring say what happened, pipes only wake.

The agent numbers its commands (``seq``) and marks steps PENDING; a waiter that saw the word while
spinning leaves the ring in the pipe, and later takes it for what it is: a spurious wake-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np

from portal_shm.agent.local.spin import default_spin_wait, server_spin
from portal_shm.bench.cpu import CpuMeter, descendants
from portal_shm.server.loop import EnvServer
from portal_shm.wire.doorbell import _CHUNK, Bell, Waiter, bell_pipe, spin_until
from portal_shm.wire.layout import MAILBOX_FIELDS, STATUS_PENDING
from portal_shm.wire.payoff import SpinPayoff

SEQ, CMD, SLOT, STATUS = (MAILBOX_FIELDS.index(n) for n in ("seq", "cmd", "slot", "status"))


def test_spin_until_sees_a_change_made_meanwhile_and_gives_up_after_its_budget():
    word = np.zeros(1, np.int64)
    assert not spin_until(lambda: word[0] != 0, 0.0)  # no budget: one look only
    begin = time.perf_counter()
    assert not spin_until(lambda: word[0] != 0, 0.002, only_idle=False)
    assert 0.002 <= time.perf_counter() - begin < 0.5
    threading.Timer(0.01, lambda: word.__setitem__(0, 1)).start()
    assert spin_until(lambda: word[0] != 0, 5.0, only_idle=False)


def test_rings_left_by_spinning_are_read_in_bulk_and_never_fill_the_pipe():
    read, write = bell_pipe()
    bell, waiter = Bell(write), Waiter(read)
    for _ in range(70_000):  # more than a pipe holds (64 KiB), each seen while spinning
        bell.ring()
        waiter.skipped()
    assert len(os.read(read, 1 << 17)) == 70_000 % (_CHUNK // 2)  # only those since the last bulk read
    bell.ring()
    assert waiter.wait(0.0)  # a ring left over wakes once; the status word then says it was nothing
    assert not waiter.wait(0.0)
    bell.close()
    waiter.wait(0.0)
    assert waiter.closed
    waiter.close()


def _server(spin):
    """An EnvServer with only what ``wait_command`` needs: a mailbox and its go pipe."""
    server = EnvServer.__new__(EnvServer)
    server.mailbox = np.zeros(len(MAILBOX_FIELDS), np.int64)
    server._words = memoryview(server.mailbox)
    server.seq = 0
    server.spin = spin
    server.payoff = SpinPayoff(spin or 0.0)
    read, write = bell_pipe()
    server.go = Waiter(read)
    return server, Bell(write)


def test_a_server_takes_a_numbered_command_once_whether_it_spins_or_sleeps():
    for spin in (0.0, 0.05):
        server, bell = _server(spin)
        server.mailbox[SEQ] = 1
        bell.ring()
        assert server.wait_command()
        # the ring of command 1 may still be in the pipe: it is not a second command
        begin = time.monotonic()
        assert not server.wait_command()
        assert time.monotonic() - begin >= 0.4  # slept for IDLE_CHECK_SECONDS, found nothing
        server.mailbox[SEQ] = 2
        bell.ring()
        assert server.wait_command() and server.seq == 2
        bell.close()
        server.go.close()


def test_a_server_stops_spinning_for_commands_that_come_later_than_its_budget_and_starts_again():
    """An agent that thinks for milliseconds between steps finds its servers asleep (they do not
    spin through its thinking); one that answers within the budget finds them spinning again."""
    server, bell = _server(0.02)
    for n in range(1, 12):  # commands 60 ms after the wait begins: every 20 ms spin runs out
        threading.Timer(0.06, lambda n=n: (server.mailbox.__setitem__(SEQ, n), bell.ring())).start()
        assert server.wait_command() and server.seq == n
    assert not server.payoff.worth_it()
    begin = time.thread_time()
    threading.Timer(0.06, lambda: (server.mailbox.__setitem__(SEQ, 12), bell.ring())).start()
    assert server.wait_command() and server.seq == 12
    assert time.thread_time() - begin < 0.01  # it slept at once: no 20 ms spin
    for n in range(13, 30):  # then quick commands: measured while it sleeps, it spins again
        threading.Timer(0.0002, lambda n=n: (server.mailbox.__setitem__(SEQ, n), bell.ring())).start()
        assert server.wait_command() and server.seq == n
    assert server.payoff.worth_it()
    bell.close()
    server.go.close()


def test_an_agent_that_does_not_number_its_commands_still_drives_a_server():
    server, bell = _server(None)
    bell.ring()
    assert server.wait_command()
    bell.close()
    server.go.close()


def _link():
    """A ServerLink with only what ``post`` needs: its mailbox row and go pipe (and that pipe's
    reading end, to see its rings)."""
    from portal_shm.agent.local.session import ServerLink

    link = ServerLink(0, [0], None)
    box = np.zeros(len(MAILBOX_FIELDS), np.int64)
    link.mailbox = memoryview(box)
    read, write = bell_pipe()
    link.go, waiter = Bell(write), Waiter(read)
    return link, box, waiter


def test_post_writes_the_command_then_its_number_then_rings():
    link, box, waiter = _link()
    link.post(7, 3, pending=True)
    link.post(7, 0)
    assert (box[CMD], box[SLOT], box[STATUS], box[SEQ]) == (7, 0, STATUS_PENDING, 2)
    assert waiter.wait(0.0)
    link.go.close()
    waiter.close()


def test_spin_policy(monkeypatch):
    monkeypatch.setenv("PORTAL_SHM_SPIN_WAIT", "0.001")
    assert default_spin_wait() == 0.001
    monkeypatch.setenv("PORTAL_SHM_SPIN_WAIT", "0")
    assert default_spin_wait() == 0.0
    cores = len(os.sched_getaffinity(0))
    assert server_spin(0.001, cores) == 0.004 and server_spin(0.001, cores + 1) == 0.0  # 4 x, while they fit


def test_the_agent_stops_spinning_for_results_that_come_later_than_its_budget_and_starts_again():
    """Atari batches take milliseconds: spins that run out, or sleeps longer than the budget, turn
    the spin off; results that come within the budget (seen by a sleep too) turn it back on."""
    payoff = SpinPayoff(200e-6)
    assert payoff.worth_it()
    payoff.spun(True)
    for _ in range(5):
        payoff.spun(False)
    assert payoff.worth_it()  # a few misses among hits: still more likely than not to pay
    for _ in range(3):
        payoff.spun(False)
    assert not payoff.worth_it()
    for _ in range(20):
        payoff.slept(1.5e-3)
    assert not payoff.worth_it()
    for _ in range(6):
        payoff.slept(50e-6)
    assert payoff.worth_it()
    assert not SpinPayoff(0.0).worth_it()  # spin_wait=0: never


def test_cpu_meter_counts_the_processes_working_for_the_agent():
    burn = (
        "import sys, time\nsys.stdin.readline()\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\nprint('done', flush=True)\nsys.stdin.readline()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.pid in descendants([os.getpid()])
        meter = CpuMeter()
        before = meter.read()
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"done\n"
        assert meter.read() - before >= 0.25  # the child's CPU, though this process only waited
    finally:
        child.kill()
        child.wait()


def test_post_asks_for_an_early_ring_only_of_servers_that_know_it():
    from portal_shm.wire.protocol import CMD_RING_EARLY, CMD_STEP

    link, box, waiter = _link()
    link.post(CMD_STEP, 0, pending=True, early=True)
    assert box[CMD] == CMD_STEP  # an older server's hello does not say ring_early
    link.hello = {"ring_early": True}
    link.post(CMD_STEP, 0, pending=True, early=True)
    assert box[CMD] == CMD_STEP | CMD_RING_EARLY
    link.post(CMD_STEP, 0, pending=True)  # spin_wait=0: the agent watches no words
    assert box[CMD] == CMD_STEP
    link.go.close()
    waiter.close()


def test_a_server_asked_to_ring_early_rings_before_its_results_with_status_writing(monkeypatch):
    """Only while the machine has a core for the agent to wake on (else it rings after them)."""
    import portal_shm.server.native_stepper as native_stepper
    from portal_shm.wire.layout import STATUS_WRITING

    mailbox = np.full(len(MAILBOX_FIELDS), 0, np.int64)
    mailbox[STATUS] = STATUS_PENDING
    read, write = bell_pipe()
    early, waiter = native_stepper.EarlyRing(mailbox, Bell(write)), Waiter(read)
    early.stepped()
    assert mailbox[STATUS] == STATUS_PENDING and not early.rang and not waiter.wait(0.0)
    early.asked = True
    monkeypatch.setattr(native_stepper, "cores_idle", lambda: False)
    early.stepped()
    assert mailbox[STATUS] == STATUS_PENDING and not early.rang and not waiter.wait(0.0)
    monkeypatch.setattr(native_stepper, "cores_idle", lambda: True)
    early.stepped()
    assert mailbox[STATUS] == STATUS_WRITING and early.rang and waiter.wait(0.0)
    early.bell.close()
    waiter.close()


def _early_ringer(mailbox, bell, writing_for):
    """What a server asked to ring early does: WRITING and a ring, then its results a while later."""
    from portal_shm.wire.layout import STATUS_OK, STATUS_WRITING

    def run():
        mailbox[STATUS] = STATUS_WRITING
        bell.ring()
        time.sleep(writing_for)
        mailbox[STATUS] = STATUS_OK

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _lockstep_waiting_for(box, waiter, spin_wait=200e-6, step_timeout=5.0):
    from portal_shm.agent.local.lockstep import Lockstep
    from portal_shm.agent.local.session import ServerLink

    lockstep = Lockstep.__new__(Lockstep)
    lockstep.spin_wait, lockstep.payoff, lockstep.step_timeout = spin_wait, SpinPayoff(spin_wait), step_timeout
    lockstep.no_wait, lockstep.awaited = False, []
    link = ServerLink(0, [0], None)
    link.mailbox, link.done = memoryview(box), waiter
    return lockstep, link


def test_the_agent_woken_early_waits_for_the_results_and_a_stale_ring_does_not_end_its_wait():
    from portal_shm.wire.layout import STATUS_OK

    box = np.zeros(len(MAILBOX_FIELDS), np.int64)
    read, write = bell_pipe()
    bell, waiter = Bell(write), Waiter(read)
    lockstep, link = _lockstep_waiting_for(box, waiter)
    lockstep.payoff.odds = 0.0  # asleep on the pipe, as for an Atari step
    box[STATUS] = STATUS_PENDING
    bell.ring()  # a ring left from a step seen while spinning: the status is still PENDING
    threading.Timer(0.05, lambda: _early_ringer(box, bell, 0.03)).start()
    begin = time.monotonic()
    lockstep._wait_done(link, time.monotonic() + 5.0)
    assert box[STATUS] == STATUS_OK and time.monotonic() - begin >= 0.08  # the results, not the rings
    bell.close()
    waiter.close()


def test_a_server_stuck_writing_is_reported_at_the_deadline_not_waited_for_forever():
    from portal_shm.errors import PortalTimeoutError
    from portal_shm.wire.layout import STATUS_WRITING

    box = np.zeros(len(MAILBOX_FIELDS), np.int64)
    read, write = bell_pipe()
    bell, waiter = Bell(write), Waiter(read)
    lockstep, link = _lockstep_waiting_for(box, waiter, step_timeout=0.2)
    box[STATUS] = STATUS_WRITING
    bell.ring()
    begin = time.monotonic()
    try:
        lockstep._wait_done(link, time.monotonic() + 0.2)
        raise AssertionError("a server stuck in WRITING ended the wait")
    except PortalTimeoutError as exc:
        assert "step_timeout" in str(exc)
    assert 0.2 <= time.monotonic() - begin < 2.0
    bell.close()
    waiter.close()


class _NoRestarts:
    enabled = False


def test_a_driver_that_may_never_wait_is_never_made_to_by_a_servers_status_word(tmp_path):
    """An env host's router asks ``step_finished`` and finishes with ``no_wait``: an env that writes
    its server's status word ("writing, results follow", "done, a message follows") and rings, or
    puts it back to busy after it said done, never makes it wait (it would wait for every tenant)."""
    import zmq

    from portal_shm.agent.local.control import ControlChannel
    from portal_shm.agent.local.lockstep import NotFinished
    from portal_shm.wire.layout import EXTRA, STATUS_OK, STATUS_WRITING

    box = np.zeros(len(MAILBOX_FIELDS), np.int64)
    read, write = bell_pipe()
    bell, waiter = Bell(write), Waiter(read)
    lockstep, link = _lockstep_waiting_for(box, waiter)
    lockstep.servers, lockstep.recovery = [link], _NoRestarts()
    context = zmq.Context()
    link.channel = ControlChannel(context, f"ipc://{tmp_path}/control")
    try:
        begin = time.monotonic()
        box[STATUS] = STATUS_WRITING
        bell.ring()
        assert lockstep.step_finished({waiter.fd: 1}) is False  # (it used to watch the word: forever)
        box[STATUS], box[EXTRA] = STATUS_OK, 1
        bell.ring()
        assert lockstep.step_finished({waiter.fd: 1}) is False  # the message it promised is not there
        assert lockstep.awaited == [link.channel.socket]  # what the driver's poller watches for it
        box[EXTRA] = 0
        assert lockstep.step_finished({}) is True
        box[STATUS] = STATUS_PENDING  # said done, then went back: the finish raises instead of waiting
        lockstep.no_wait = True
        try:
            lockstep._wait_done(link, None)
            raise AssertionError("a server that went back on its status made the driver wait")
        except NotFinished as exc:
            assert "env server 0" in str(exc)
        box[STATUS], box[EXTRA] = STATUS_OK, 1
        try:
            lockstep._step_message(link, None, {})
            raise AssertionError("a promised message that is not there made the driver wait")
        except NotFinished as exc:
            assert "has not sent it" in str(exc)
        assert time.monotonic() - begin < 1.0
    finally:
        link.channel.close()
        context.term()
        bell.close()
        waiter.close()
