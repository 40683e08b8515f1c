"""One benchmark per device at a time, whoever starts it (the CLI, Dagster, a script): a run holds
an exclusive `flock` per device its pipelines use for its whole length. The kernel drops a flock
when its process dies, so a killed run never leaves a device locked."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from stages.contracts.errors import DeviceBusyError

logger = logging.getLogger(__name__)

POLL_S = 0.5


class DeviceBusy(DeviceBusyError, RuntimeError):
    """A device stayed held by another benchmark for longer than the wait allowed."""


def device_key(device: str) -> str:
    """The lock's name for a device: `cuda` is `cuda:0` (the device torch picks), so both
    spellings share one lock; anything else is kept, made file-name safe."""
    name = "cuda:0" if device == "cuda" else device
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _holder(handle: IO[str]) -> str:
    handle.seek(0)
    with contextlib.suppress(ValueError):
        owner = json.loads(handle.read() or "{}")
        return f"pid {owner.get('pid')} (run {owner.get('run_id')})"
    return "another process"


@contextlib.contextmanager
def held_devices(
    devices: Iterable[str], lock_dir: Path, wait_s: float, run_id: str | None = None
) -> Iterator[None]:
    """Hold every device's lock for the `with` block, waiting up to `wait_s` for each (locks are
    taken in sorted order, so two runs wanting the same devices cannot deadlock)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for key in sorted({device_key(device) for device in devices}):
            handle = stack.enter_context((lock_dir / f"device-{key}.lock").open("a+"))
            _acquire(handle, key, wait_s)
            stack.callback(fcntl.flock, handle, fcntl.LOCK_UN)
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "run_id": run_id}))
            handle.flush()
        yield


def _acquire(handle: IO[str], key: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    warned = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(handle)
            if time.monotonic() >= deadline:
                raise DeviceBusy(
                    f"device {key} is held by another benchmark, {holder}, for longer than "
                    f"{wait_s:g} s (COLLOBENCH_DEVICE_WAIT_S)"
                ) from None
            if not warned:
                logger.warning("waiting for device %s: another benchmark holds it, %s", key, holder)
                warned = True
            time.sleep(POLL_S)
