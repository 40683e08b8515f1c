"""`IdleFlag`: `threading.Event`'s behaviour for the in-flight table's idle signal, without a
lock on `set`, `clear` and `is_set` while nobody waits."""

from __future__ import annotations

import threading
import time
from typing import Any

from stages.runtime.completion import IdleFlag


class CountingCondition:
    """A `threading.Condition` that counts how often it is entered."""

    def __init__(self) -> None:
        self.entered = 0
        self._condition = threading.Condition(threading.Lock())

    def __enter__(self) -> Any:
        self.entered += 1
        return self._condition.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self._condition.__exit__(*exc_info)

    def wait(self, timeout: float | None = None) -> bool:
        return self._condition.wait(timeout)

    def notify_all(self) -> None:
        self._condition.notify_all()


def test_set_clear_and_is_set_take_no_lock_without_a_waiter() -> None:
    flag = IdleFlag()
    condition = CountingCondition()
    flag._condition = condition  # type: ignore[assignment]
    assert not flag.is_set()
    for _ in range(100):
        flag.set()
        assert flag.is_set() and flag.wait(0)
        flag.clear()
    assert not flag.is_set()
    assert condition.entered == 0


def test_a_waiter_is_woken_by_set_from_another_thread() -> None:
    flag = IdleFlag()
    condition = CountingCondition()
    flag._condition = condition  # type: ignore[assignment]
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(flag.wait(10)))
    waiter.start()
    while flag._waiters == 0:  # registered, asleep on the condition
        time.sleep(0.001)
    started = time.monotonic()
    flag.set()
    waiter.join(5)
    assert woke == [True] and time.monotonic() - started < 5
    assert condition.entered == 2  # the waiter's entry and the notifying set's


def test_a_set_cleared_again_before_the_waiter_runs_still_wakes_it() -> None:
    """As `Event.wait`: the set happened, so the wait reports it."""
    flag = IdleFlag()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(flag.wait(10)))
    waiter.start()
    while flag._waiters == 0:
        time.sleep(0.001)
    with flag._condition:  # the waiter cannot return before both happened
        flag._flag = True
        flag._condition.notify_all()
        flag.clear()
    waiter.join(5)
    assert woke == [True]


def test_a_wait_times_out_false() -> None:
    flag = IdleFlag()
    started = time.monotonic()
    assert flag.wait(0.05) is False
    assert time.monotonic() - started >= 0.05
    assert flag._waiters == 0
