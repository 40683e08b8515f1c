"""The `spawns` marker, enforced: in a check session a test not marked `spawns` that starts a
process fails, naming the marker, so the quick selection of `make check` cannot rot.

`make check` runs `pytest -m "not spawns ..."` with COLLOBENCH_CHECK=1: the tests that start no
subprocess, process pool, server, Dagster instance or browser (and not `slow`), in under 2
minutes. A check session is one with COLLOBENCH_CHECK=1 or a `-m` expression holding
`not spawns`. There, while a
test's setup, call or teardown runs, the ways a Python process starts another are patched to
fail it: `subprocess.Popen` (and so `subprocess.run`, asyncio's subprocesses, `os.popen`),
`os.fork`, `os.posix_spawn[p]`, `os.system` and `multiprocessing`'s `Process.start` (and so
every pool). A start in a background thread is remembered and fails the phase when it ends
(also when the test then fails for another reason: the guard's message is the one shown).
Outside a check session nothing is patched.

Two starts are not the test's but CPython's own look-ups, made in a child process:
`ctypes.util.find_library` runs `ldconfig -p` (stages.runtime.loadgen.timing finds libc so for
prctl), and `platform.processor()` runs `uname -p` once per process (the busy stage's
calibration key): allowed, or the guard would flag whichever test happens to ask first.

tests/conftest.py loads this module as a plugin (`pytest_plugins`), for every test under tests/.
"""

from __future__ import annotations

import ctypes.util
import functools
import multiprocessing.process
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any

import pytest

MARKER = "spawns"
CHECK_ENV = "COLLOBENCH_CHECK"


class _Guard:
    """Which test phase is running unmarked, and the process starts it attempted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodeid: str | None = None  # the unmarked test whose phase is running
        self.attempts: list[str] = []
        self.installed = False


_GUARD = _Guard()


def _message(nodeid: str, what: str) -> str:
    return (
        f"{nodeid} started a process ({what}) but is not marked `{MARKER}`: mark it "
        f"`@pytest.mark.{MARKER}` (or the module: `pytestmark = pytest.mark.{MARKER}`), so "
        "that `make check` (pytest -m 'not spawns') leaves it to `make test`"
    )


_LOOKUPS = frozenset({ctypes.util.__file__, platform.__file__})


def _from_a_lookup() -> bool:
    """Whether the start comes from CPython's `ctypes.util` or `platform` module."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename in _LOOKUPS:
            return True
        frame = frame.f_back
    return False


def _refuse(what: str) -> None:
    """Fail the running unmarked test, if any, for starting a process (`what`)."""
    if _GUARD.nodeid is None or _from_a_lookup():
        return
    with _GUARD.lock:
        nodeid = _GUARD.nodeid
        if nodeid is None:
            return
        _GUARD.attempts.append(what)
    pytest.fail(_message(nodeid, what), pytrace=True)


def _guarded(original: Callable[..., Any], describe: Callable[..., str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _refuse(describe(*args, **kwargs))
        return original(*args, **kwargs)

    return wrapper


def _popen_target(_self: object, args: Any, *_rest: object, **_kwargs: object) -> str:
    if isinstance(args, str | bytes | os.PathLike):
        return f"subprocess.Popen({os.fsdecode(args)[:80]!r})"
    return f"subprocess.Popen({[os.fsdecode(a) for a in list(args)[:3]]!r}...)"


def _install() -> None:
    """Patch the process-starting calls once per session; they refuse only while an unmarked
    test's phase runs (`_GUARD.nodeid` set)."""
    if _GUARD.installed:
        return
    _GUARD.installed = True
    subprocess.Popen.__init__ = _guarded(  # type: ignore[method-assign]
        subprocess.Popen.__init__, _popen_target
    )
    os.fork = _guarded(os.fork, lambda: "os.fork()")
    os.posix_spawn = _guarded(os.posix_spawn, lambda path, *_a, **_k: f"os.posix_spawn({path!r})")
    os.posix_spawnp = _guarded(
        os.posix_spawnp, lambda path, *_a, **_k: f"os.posix_spawnp({path!r})"
    )
    os.system = _guarded(os.system, lambda command: f"os.system({command!r})")
    base = multiprocessing.process.BaseProcess
    base.start = _guarded(  # type: ignore[method-assign]
        base.start, lambda process: f"multiprocessing {type(process).__name__}.start()"
    )


def is_check_session(config: pytest.Config) -> bool:
    """COLLOBENCH_CHECK=1 (`make check`), or a `-m` expression that leaves out `spawns`."""
    markexpr = " ".join(str(config.option.markexpr or "").split())
    return os.environ.get(CHECK_ENV) == "1" or f"not {MARKER}" in markexpr


def pytest_configure(config: pytest.Config) -> None:
    """Install the guard in a check session (the marker itself is registered in pyproject)."""
    if is_check_session(config):
        _install()


def _guard_phase(item: pytest.Item) -> Generator[None, object, object]:
    """Run one phase of `item` with process starts refused unless it is marked `spawns`; a
    start refused in another thread fails the phase when it ends."""
    if not _GUARD.installed or item.get_closest_marker(MARKER) is not None:
        return (yield)
    with _GUARD.lock:
        _GUARD.nodeid, _GUARD.attempts = item.nodeid, []
    try:
        result = yield
    except BaseException:
        attempts = _end_phase()
        if not attempts:
            raise
        # A start refused in a thread can make the test fail otherwise (a thread that died):
        # the cause is the start.
        pytest.fail(_message(item.nodeid, attempts[0]), pytrace=False)
    if attempts := _end_phase():
        pytest.fail(_message(item.nodeid, attempts[0]), pytrace=False)
    return result


def _end_phase() -> list[str]:
    """Stop refusing; the starts refused during the phase."""
    with _GUARD.lock:
        _GUARD.nodeid, attempts = None, _GUARD.attempts
    return attempts


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard_phase(item))
