"""The kernel hints of the runtime's threads: the issuer's short slice (set and given back),
background threads' nice value (their own only), OS thread names, and the switch that turns
the hints off."""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable
from typing import Any

import pytest

from stages.runtime import os_threads


def _slice_ns() -> int:
    libc = os_threads.c_library()
    assert libc is not None
    attr = os_threads._get_attr(libc, os_threads._SCHED_ATTR_CALLS[platform.machine()][1])
    assert attr is not None
    return int(attr.sched_runtime)


def _in_thread(body: Callable[[], Any]) -> Any:
    """`body()` run in a fresh thread (hints change the calling thread only)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(body()))
    thread.start()
    thread.join()
    return result[0]


def test_the_issuer_slice_is_short_inside_and_given_back_after() -> None:
    def body() -> tuple[int, bool, int, int]:
        before = _slice_ns()
        with os_threads.short_wakeup_slice() as applied:
            inside = _slice_ns()
        return before, applied, inside, _slice_ns()

    before, applied, inside, after = _in_thread(body)
    assert applied
    assert inside == os_threads.ISSUER_SLICE_NS != before
    assert after == before


def test_hints_off_leave_slice_and_priority_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(os_threads.HINTS_ENV, "0")

    def body() -> tuple[int, bool, int, bool, int]:
        before = _slice_ns()
        with os_threads.short_wakeup_slice() as applied:
            inside = _slice_ns()
        lowered = os_threads.lower_priority()
        return before, applied, inside, lowered, os.getpriority(os.PRIO_PROCESS, 0)

    before, applied, inside, lowered, nice = _in_thread(body)
    assert (applied, inside, lowered) == (False, before, False)
    assert nice == os.getpriority(os.PRIO_PROCESS, 0)


def test_a_background_thread_lowers_its_own_priority_only() -> None:
    own_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def body() -> tuple[bool, int]:
        lowered = os_threads.lower_priority()
        return lowered, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    lowered, nice = _in_thread(body)
    assert lowered and nice == max(own_nice, os_threads.BACKGROUND_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own_nice


def test_threads_carry_their_names_into_the_kernel() -> None:
    names: list[str | None] = []
    target = os_threads.named_target(
        "stage:a-very-long-stage-name", lambda: names.append(os_threads.os_thread_name())
    )
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert names == ["stage:a-very-lo"]  # the kernel keeps 15 bytes
