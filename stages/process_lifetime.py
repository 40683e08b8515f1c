"""Child processes never outlive the launcher: they ask the kernel for a signal when it dies;
and the launcher never outlives the process that started it (`ParentWatch`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Mapping

import psutil

from stages.settings import PARENT_PID_ENV

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Deliver `sig` to this process when its parent dies (Linux); False where unsupported.

    The kernel ties this to the parent *thread* that spawned us; the launcher spawns from its
    main thread, which lives as long as the launcher does.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except OSError:
        return False


# ----------------------------------------------------------------------------- parent watch

PARENT_DIED = "parent died"
POLL_S = 0.5
_stop_reason: list[str] = []  # why this process was told to stop (read by the signal handler)


def stop_reason() -> str | None:
    """Why `ParentWatch` stopped this process (None: a signal from outside did)."""
    return _stop_reason[-1] if _stop_reason else None


def _watched(environ: Mapping[str, str]) -> tuple[int, float | None] | None:
    """(pid, its start time) of the process to watch: `$COLLOBENCH_PARENT_PID` when set (`0`
    turns the watch off), else the parent (start time None: watched by `os.getppid()`, which
    changes when the parent dies and we are reparented). None: nothing to watch."""
    value = environ.get(PARENT_PID_ENV)
    if value is None:
        parent = os.getppid()
        return None if parent <= 1 else (parent, None)
    pid = int(value) if value.strip().isdigit() else 0
    if pid <= 0:
        return None
    try:
        return pid, psutil.Process(pid).create_time()
    except psutil.Error:
        return pid, -1.0  # already gone: the first poll says so


def _alive(pid: int, started: float | None) -> bool:
    if started is None:
        return os.getppid() == pid
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ParentWatch:
    """Ends this process like SIGTERM does when the process that started it dies (a Celery
    worker or Dagster's run worker SIGKILLed), so no orphan keeps measuring or holds a device
    lock: a daemon thread polls the watched process every POLL_S and, once it is gone, records
    the reason ("parent died", see `stop_reason`) and sends SIGTERM to this process. The
    launcher's handler then stops workers, samplers and services and writes the manifest
    (status interrupted); outside a run, SIGTERM's default ends the process and the kernel
    drops its locks. PR_SET_PDEATHSIG is not used: it fires when the parent *thread* that
    forked ends, and a Dagster step or Celery task may start us from a short-lived thread."""

    def __init__(self, environ: Mapping[str, str] = os.environ, poll_s: float = POLL_S) -> None:
        self._target = _watched(environ)
        self._poll_s = poll_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="parent-watch", daemon=True)

    def __enter__(self) -> ParentWatch:
        _stop_reason.clear()
        if self._target is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        assert self._target is not None
        pid, started = self._target
        while not self._done.wait(self._poll_s):
            if not _alive(pid, started):
                _stop_reason.append(f"{PARENT_DIED} (pid {pid})")
                os.kill(os.getpid(), signal.SIGTERM)
                return
