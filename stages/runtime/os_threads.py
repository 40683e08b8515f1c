"""What the runtime tells the kernel about its threads: their names, the open-loop issuer's
short wake-up slice, and the lower priority of the threads nobody measures.

Why: on a machine with few cores the issuer wakes for each arrival while the recorder's
writer, the progress reporter or another process holds a core. Linux's EEVDF scheduler lets
the running thread finish its slice (1.4 ms here by default) before a woken one of the same
priority gets the core, so queries were issued milliseconds late whenever the Parquet writer
was busy (measured with `perf sched`: the writer was on a core during 55-60% of all lateness
through `collobench run`, see perf/studies/issue_delay_sources.py). Two unprivileged hints fix that:

- `short_wakeup_slice`: the issuer asks for a 100 us slice (`sched_setattr`, Linux 6.12+).
  A woken thread with a shorter slice than the running one preempts it at once.
- `lower_priority`: background threads raise their own nice value, so the kernel prefers the
  measured threads; they still get their share when the cores are free.

Both are hints, on by default; `COLLOBENCH_THREAD_HINTS=0` turns them off (to measure what
they do, as perf/studies/issue_delay_sources.py does). Where the kernel refuses or does not know
them (another OS, an older kernel, a seccomp filter) they do nothing and say so, and the run goes
on unchanged. Names make `top -H`
and `perf sched` show which of the runtime's threads ran (`name_os_thread`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterator

ISSUER_SLICE_NS = 100_000
"""The issuer's requested slice: the kernel's minimum (0.1 ms)."""
BACKGROUND_NICE = 10
"""Nice value of threads that record or report but are not measured (weight 110 against 1024:
under contention they get ~10% of a core each, several times what they need)."""
OS_NAME_BYTES = 15  # the kernel keeps 15 bytes of a thread's name (and a NUL)

HINTS_ENV = "COLLOBENCH_THREAD_HINTS"
"""Set to 0 to leave every thread at the kernel's default slice and priority."""
PR_SET_NAME = 15
# Architecture -> (sched_setattr, sched_getattr) system call numbers.
_SCHED_ATTR_CALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}


class _SchedAttr(ctypes.Structure):
    """`struct sched_attr` (include/uapi/linux/sched/types.h), version 1 (56 bytes)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),  # for SCHED_OTHER: the EEVDF slice (ns)
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


def hints_enabled() -> bool:
    """Whether the slice and priority hints apply (`HINTS_ENV` is not 0)."""
    return os.environ.get(HINTS_ENV, "1").strip() != "0"


@functools.cache
def c_library() -> ctypes.CDLL | None:
    """The C library (Linux only; None elsewhere or when it does not load), loaded once."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def _get_attr(libc: ctypes.CDLL, number: int) -> _SchedAttr | None:
    attr = _SchedAttr()
    if libc.syscall(number, 0, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr


def _set_attr(libc: ctypes.CDLL, number: int, attr: _SchedAttr) -> bool:
    attr.size = ctypes.sizeof(_SchedAttr)
    return int(libc.syscall(number, 0, ctypes.byref(attr), 0)) == 0


@contextlib.contextmanager
def short_wakeup_slice(slice_ns: int = ISSUER_SLICE_NS) -> Iterator[bool]:
    """Inside `with`, the calling thread asks for a `slice_ns` scheduling slice, so its
    wake-ups preempt threads with longer ones; the previous slice comes back on exit. Yields
    whether the kernel took the request (False: hints off, not Linux, an unknown
    architecture, a real-time policy already set, or refused)."""
    restore = _request_slice(slice_ns) if hints_enabled() else None
    try:
        yield restore is not None
    finally:
        if restore is not None:
            restore()


def _request_slice(slice_ns: int) -> Callable[[], object] | None:
    """Ask for the slice; returns the call that puts the previous one back (None: not taken)."""
    libc, numbers = c_library(), _SCHED_ATTR_CALLS.get(platform.machine())
    if libc is None or numbers is None:
        return None
    set_number, get_number = numbers
    before = _get_attr(libc, get_number)
    # Only the normal policies take a slice; a thread someone made real-time keeps its policy.
    if before is None or before.sched_policy not in (os.SCHED_OTHER, os.SCHED_BATCH):
        return None
    wanted = _SchedAttr.from_buffer_copy(before)
    wanted.sched_runtime = slice_ns
    if not _set_attr(libc, set_number, wanted):
        return None
    return lambda: _set_attr(libc, set_number, before)


def lower_priority(nice: int = BACKGROUND_NICE) -> bool:
    """Raise the calling thread's nice value to `nice` (never lowers it: that needs
    privileges). Returns whether the thread now runs at `nice` or lower priority."""
    if not hasattr(os, "setpriority") or not hints_enabled():
        return False
    thread_id = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread_id) >= nice:
            return True
        # On Linux PRIO_PROCESS with a thread id sets that thread only.
        os.setpriority(os.PRIO_PROCESS, thread_id, nice)
    except OSError:
        return False
    return True


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (its first 15 bytes), as `top -H`,
    `ps -L` and `perf sched` show it; Python's thread names stay inside Python."""
    libc = c_library()
    if libc is not None:
        encoded = name.encode("utf-8", "replace")[:OS_NAME_BYTES]
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(encoded), 0, 0, 0)


def named_target(name: str, target: Callable[[], None]) -> Callable[[], None]:
    """`target`, run by a thread that first takes `name` in the kernel too."""

    def run() -> None:
        name_os_thread(name)
        target()

    return run


def os_thread_name() -> str | None:
    """The calling thread's kernel name (Linux), else None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return None
