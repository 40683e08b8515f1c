"""Worker death (issue 21): when the process that started `collobench run` dies (a Celery worker
or Dagster's run worker SIGKILLed), the run ends as on SIGTERM: no process of it is left, its
device lock is free, and its manifest says interrupted because its parent died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import yaml

from stages.collocation.device_locks import DeviceBusy, held_devices
from stages.process_lifetime import ParentWatch, stop_reason
from stages.settings import PARENT_PID_ENV
from tests.helpers import REPO, spec_doc

# The parent: starts the run in a session of its own (as GroupPipesClient does), says its pid,
# then waits for the SIGKILL. argv: spec, out dir, "env" to name itself in PARENT_PID_ENV (as
# GroupPipesClient does) or "ppid" to rely on the default watch of the parent.
PARENT = """
import os, subprocess, sys, time
env = dict(os.environ)
if sys.argv[3] == "env":
    env["COLLOBENCH_PARENT_PID"] = str(os.getpid())
run = subprocess.Popen(
    [sys.executable, "-m", "stages.cli", "run", sys.argv[1], "--out", sys.argv[2], "--no-load"],
    env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
print(run.pid, flush=True)
time.sleep(600)
"""


def group(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of the process group."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.Error, ProcessLookupError):
            pass
    return found


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.spawns
@pytest.mark.slow
@pytest.mark.parametrize("watch", ["env", "ppid"])
def test_a_run_whose_parent_is_killed_stops_and_frees_its_device(
    tmp_path: Path, watch: str
) -> None:
    doc = spec_doc({"type": "noop"}, duration_s=120, timeout_s=200)
    doc["pipelines"] = doc["pipelines"][:1]  # `victim` alone: noop -> noop for two minutes
    spec = tmp_path / "long.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out, locks = tmp_path / "runs", tmp_path / "locks"
    env = {**os.environ, "COLLOBENCH_MLFLOW": "0", "COLLOBENCH_LOCK_DIR": str(locks)}
    env.pop(PARENT_PID_ENV, None)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(spec), str(out), watch],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pgid = int(parent.stdout.readline())
    try:
        # Measuring: the run's worker and sampler are up and its manifest says running.
        wait_for(lambda: len(group(pgid)) >= 3, 60, "the run's workers")
        wait_for(lambda: list(out.glob("*/parts")), 60, "the first rows")
        with pytest.raises(DeviceBusy), held_devices(["cpu"], locks, 0):
            pass  # the run holds its device
        parent.kill()
        parent.wait()
        started = time.monotonic()
        wait_for(lambda: not group(pgid), 15, "every process of the run to end")
        assert time.monotonic() - started < 15
    finally:
        parent.kill()
        for process in group(pgid):
            process.kill()
    with held_devices(["cpu"], locks, 0):  # the lock is free: taken without waiting
        pass
    (run_dir,) = out.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert any(w.startswith("interrupted: parent died (pid") for w in manifest["warnings"])
    assert {r["status"] for r in manifest["results"]} == {"interrupted"}


@pytest.mark.spawns
def test_the_watch_signals_this_process_once_the_named_parent_is_gone() -> None:
    """`ParentWatch` on `COLLOBENCH_PARENT_PID`: nothing while it lives; SIGTERM to this process
    with the reason recorded within a poll or two of its death (a zombie counts as dead)."""
    parent = subprocess.Popen(["sleep", "60"])
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with ParentWatch({PARENT_PID_ENV: str(parent.pid)}, poll_s=0.05):
            time.sleep(0.3)
            assert received == [] and stop_reason() is None
            parent.kill()  # not reaped yet: a zombie
            wait_for(lambda: received, 5, "the watch's SIGTERM")
        assert received == [signal.SIGTERM]
        assert stop_reason() == f"parent died (pid {parent.pid})"
    finally:
        signal.signal(signal.SIGTERM, previous)
        parent.kill()
        parent.wait()


def test_no_watch_when_told_so() -> None:
    with ParentWatch({PARENT_PID_ENV: "0"}, poll_s=0.05) as watch:
        assert not watch._thread.is_alive()
