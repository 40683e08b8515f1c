"""Process groups, written once: start a command as the leader of a new session (so of a new
process group whose id is its pid), ask whether a group still runs, and end it with grace
(SIGTERM, wait, SIGKILL), reaping the leader and sweeping what left the group.

Zombies: a process that has exited but is not yet reaped holds no memory, no CPU and no port,
and no signal can reach it, so it is never a live member. A group whose only members are zombies
is therefore not alive (an orphan's zombie may linger where PID 1 does not reap), while a zombie
leader whose children still run is (its children are live members). Used by the services
(stages.services.lifecycle), the Dagster Pipes client (bench_defs.core.resources) and the cluster
tooling (bench_defs.cluster).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

POLL_INTERVAL_S = 0.05
KILL_WAIT_S = 5.0
"""How long to wait, after SIGKILL, for the kernel to tear the group down (a loaded machine)."""


def start_group(
    argv: Sequence[str],
    *,
    stdout: IO[bytes] | int,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session, the leader of its own process group (group id = its pid),
    stdin from /dev/null and stderr into `stdout`. Raises OSError when it cannot start."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _live(process: psutil.Process) -> bool:
    """Whether `process` still runs (a zombie does not)."""
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False


def _members(pgid: int) -> Iterator[psutil.Process]:
    """The live processes of group `pgid` (zombies left out)."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and _live(process):
                yield process


def group_alive(pgid: int) -> bool:
    """True while any live process of group `pgid` exists; a group of zombies only is not."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False  # no process at all, zombies included
    except PermissionError:
        pass  # some member is another user's: look at the members all the same
    return next(_members(pgid), None) is not None


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to group `pgid`; a group already gone (or not ours to signal) is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _escaped(leader: subprocess.Popen[Any]) -> list[psutil.Process]:
    """The leader's live descendants that left its group (setsid): a group signal misses them.
    Found while the leader runs (after its death they are reparented and no longer found)."""
    if leader.poll() is not None:
        return []
    with contextlib.suppress(psutil.Error):
        descendants = psutil.Process(leader.pid).children(recursive=True)
        return [child for child in descendants if _pgid(child) not in (None, leader.pid)]
    return []


def _pgid(process: psutil.Process) -> int | None:
    with contextlib.suppress(OSError):
        return os.getpgid(process.pid)
    return None


def _signal_all(pgid: int, sig: int, escaped: list[psutil.Process]) -> None:
    signal_group(pgid, sig)
    for process in escaped:
        with contextlib.suppress(psutil.Error):
            process.send_signal(sig)


def _wait_ended(
    pgid: int, leader: subprocess.Popen[Any] | None, escaped: list[psutil.Process], wait_s: float
) -> bool:
    """Wait up to `wait_s` until the leader is reaped (when it is ours) and no live process of
    the group or of `escaped` is left; whether that happened."""
    deadline = time.monotonic() + wait_s
    while True:
        running = leader is not None and leader.poll() is None
        if not running and not group_alive(pgid) and not any(map(_live, escaped)):
            return True
        if time.monotonic() >= deadline:
            return False
        if leader is not None and leader.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # reaps it the moment it ends
                leader.wait(timeout=POLL_INTERVAL_S)
        else:
            time.sleep(POLL_INTERVAL_S)


def end_group(group: subprocess.Popen[Any] | int, grace_s: float) -> None:
    """End a process group: SIGTERM it (and the descendants of its leader that left it), wait up
    to `grace_s` for everything to end, then SIGKILL what is left; returns once nothing of it
    runs (at most `KILL_WAIT_S` after the SIGKILL). `group` is a leader this process started
    with `start_group` (it is reaped; its group id is its pid) or a group id. `grace_s=0`:
    SIGKILL straight away. Safe to call twice, and after the leader died."""
    leader = group if isinstance(group, subprocess.Popen) else None
    pgid = group.pid if isinstance(group, subprocess.Popen) else group
    escaped = _escaped(leader) if leader is not None else []
    if grace_s > 0:
        _signal_all(pgid, signal.SIGTERM, escaped)
        if _wait_ended(pgid, leader, escaped, grace_s):
            return
    _signal_all(pgid, signal.SIGKILL, [process for process in escaped if _live(process)])
    _wait_ended(pgid, leader, escaped, KILL_WAIT_S)
