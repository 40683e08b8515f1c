"""stages.process_groups: a group whose members ignore SIGTERM is killed after the grace, one
that obeys ends at once, a descendant that left the group is swept too, the leader is reaped,
and zombies never count as live members (a zombie leader with a live child does)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil
import pytest

from stages.process_groups import end_group, group_alive, start_group

# A leader and its child, both ignoring SIGTERM; the child's pid on the leader's stdout.
IGNORES_SIGTERM = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
    "time.sleep(0.3)\n"  # the child has installed its SIG_IGN
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)
# A leader whose child leaves the group (a session of its own), then waits.
ESCAPES = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)
# A leader that starts a child in its group and exits at once (left unreaped: a zombie).
LEAVES_A_CHILD = (
    "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\nprint(child.pid, flush=True)\n"
)

pytestmark = pytest.mark.spawns  # every test starts a process


def _start(code: str) -> tuple[subprocess.Popen[bytes], int]:
    """The leader running `code`, and the pid it printed."""
    leader = start_group([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert leader.stdout is not None
    return leader, int(leader.stdout.readline())


def _running(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def _zombie(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether `pid` becomes a zombie within `timeout_s` (without reaping it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        time.sleep(0.02)
    return False


def test_a_group_ignoring_sigterm_is_killed_after_the_grace_and_nothing_is_left() -> None:
    leader, child = _start(IGNORES_SIGTERM)
    try:
        assert group_alive(leader.pid)
        started = time.monotonic()
        end_group(leader, grace_s=0.5)
        assert 0.45 < time.monotonic() - started < 10
    finally:
        end_group(leader, 0.0)
    assert leader.returncode == -9  # reaped, after SIGKILL
    assert not _running(child) and not group_alive(leader.pid)


def test_a_group_that_obeys_sigterm_ends_without_waiting_out_the_grace() -> None:
    leader = start_group(["sh", "-c", "sleep 60 & sleep 60 & wait"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)  # the shell has started its sleeps
        started = time.monotonic()
        end_group(leader, grace_s=20.0)
        assert time.monotonic() - started < 10
    finally:
        end_group(leader, 0.0)
    assert leader.returncode is not None and not group_alive(leader.pid)


def test_a_descendant_that_left_the_group_is_swept_too() -> None:
    leader, escaped = _start(ESCAPES)
    try:
        assert psutil.Process(escaped).ppid() == leader.pid
        end_group(leader, grace_s=5.0)
    finally:
        end_group(leader, 0.0)
        with contextlib.suppress(psutil.Error):
            psutil.Process(escaped).kill()
    assert not _running(escaped)


def test_a_group_of_zombies_only_is_not_alive() -> None:
    leader = start_group(["true"], stdout=subprocess.DEVNULL)
    try:
        assert _zombie(leader.pid)  # not reaped yet: the group's only member is a zombie
        assert not group_alive(leader.pid)
    finally:
        end_group(leader, 1.0)
    assert leader.returncode == 0


def test_a_zombie_leader_with_a_live_child_is_a_live_group() -> None:
    leader, child = _start(LEAVES_A_CHILD)
    try:
        assert _zombie(leader.pid)
        assert _running(child) and group_alive(leader.pid)
        end_group(leader, grace_s=5.0)
    finally:
        end_group(leader, 0.0)
    assert leader.returncode == 0  # the leader exited by itself and was reaped
    assert not _running(child) and not group_alive(leader.pid)


def test_a_group_is_ended_by_its_id_alone() -> None:
    """As the cluster's `down` does for groups another process started (no leader to reap)."""
    leader, child = _start(IGNORES_SIGTERM)
    try:
        end_group(leader.pid, grace_s=0.5)
        assert not _running(child) and not group_alive(leader.pid)
    finally:
        end_group(leader, 0.0)
    assert leader.returncode == -9
