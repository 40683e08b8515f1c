"""One benchmark per device at a time, whoever starts it: the device locks the launcher holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from stages.collocation.device_locks import DeviceBusy, held_devices
from tests.helpers import REPO, run, spec_doc

pytestmark = pytest.mark.spawns  # every test here starts a process

HOLD = """
import sys, time
from pathlib import Path
from stages.collocation.device_locks import held_devices
with held_devices([sys.argv[2]], Path(sys.argv[1]), 0, run_id="holder"):
    print("held", flush=True)
    time.sleep(120)
"""


def hold_in_another_process(lock_dir: Path, device: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock_dir), device],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_device_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path, "cuda")
    try:
        started = time.monotonic()
        with pytest.raises(DeviceBusy) as busy, held_devices(["cuda:0"], tmp_path, 0.6):
            pass
        assert time.monotonic() - started >= 0.5  # it waited before giving up
        assert f"pid {holder.pid} (run holder)" in str(busy.value)
        assert "device cuda_0" in str(busy.value)
        with held_devices(["cpu", "cuda:1"], tmp_path, 0):  # other devices stay free
            pass
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_frees_its_device(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path, "cpu")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    with held_devices(["cpu"], tmp_path, 5):
        # The kernel dropped the dead holder's flock: taken at once, not after most of the wait.
        # Taking a free flock is microseconds; 1 s holds on a machine many times slower and
        # still tells it from the 5 s wait.
        assert time.monotonic() - started < 1.0


def test_a_run_waits_for_its_device_and_then_refuses_with_exit_2(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_doc({"type": "noop"}, duration_s=0.5)))
    holder = hold_in_another_process(lock_dir, "cpu")
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "stages.cli", "run", str(spec), "--no-mlflow"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "COLLOBENCH_LOCK_DIR": str(lock_dir),
                "COLLOBENCH_DEVICE_WAIT_S": "1",
            },
        )
    finally:
        holder.kill()
        holder.wait()
    assert completed.returncode == 2, completed.stderr
    assert "waiting for device cpu" in completed.stderr
    refusal = [line for line in completed.stderr.splitlines() if "for longer than 1 s" in line]
    assert len(refusal) == 1 and refusal[0].startswith(f"{spec}: device cpu is held"), refusal
    assert "Traceback" not in completed.stderr
    assert not (Path(os.environ["COLLOBENCH_HOME"]) / "runs").exists()  # nothing started


@pytest.mark.slow
def test_a_run_holds_its_devices_until_it_ends(tmp_path: Path) -> None:
    probes: list[bool] = []

    def probe_the_lock(event: object) -> None:
        if len(probes) < 3:
            try:
                with held_devices(["cpu"], tmp_path / "locks", 0):
                    probes.append(False)
            except DeviceBusy:
                probes.append(True)

    doc = spec_doc({"type": "noop"}, duration_s=0.5)
    result = run(doc, tmp_path, progress=probe_the_lock, lock_dir=tmp_path / "locks")
    assert result.status == "ok"
    assert probes and all(probes)  # held while the run reported progress
    with held_devices(["cpu"], tmp_path / "locks", 0):  # and released after it
        pass
