"""The calibration workloads: the CPU loop scores a core's speed (a busy process on the same
core halves it), the GPU subprocess turns "no CUDA" or "no torch" into no score, and its script
measures for real with torch on the CPU (no GPU here)."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stages.telemetry.calibration import (
    CPU_UNIT,
    CalibrationError,
    GpuUnavailable,
    cpu_score,
    gpu_scores,
)

Scores = tuple[list[float], list[float]]


def _scores(core: int, hog: subprocess.Popen[bytes], rounds: int) -> Scores:
    """Scores on `core` alone (the hog stopped) and beside it (running), interleaved so that
    the VM's own drift (tens of percent over seconds here) hits both alike."""
    alone, contended = [], []
    for _ in range(rounds):
        os.killpg(hog.pid, signal.SIGSTOP)
        alone.append(cpu_score([core], chunk_ms=25, duration_ms=200).score)
        os.killpg(hog.pid, signal.SIGCONT)
        time.sleep(0.02)
        contended.append(cpu_score([core], chunk_ms=25, duration_ms=200).score)
    return alone, contended


@pytest.mark.spawns
@pytest.mark.serial
def test_a_busy_process_on_the_measured_core_lowers_the_score() -> None:
    core = max(os.sched_getaffinity(0))
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"],
        start_new_session=True,  # its own process group, killed as one
    )
    try:
        time.sleep(0.1)
        alone, contended = _scores(core, hog, rounds=4)
    finally:
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()
    assert min(alone) > 0 and min(contended) > 0
    # Sharing the core with a busy loop leaves about half of it.
    assert statistics.median(contended) < 0.75 * statistics.median(alone), (alone, contended)


def test_the_cpu_score_runs_in_a_pinned_thread_and_leaves_the_caller_alone() -> None:
    before = os.sched_getaffinity(0)
    score = cpu_score([min(before)], chunk_ms=2, duration_ms=10)
    assert score.workload == "cpu_loop" and score.unit == CPU_UNIT and score.score > 0
    assert 0 < score.end_ns - score.start_ns < 2e9
    assert os.sched_getaffinity(0) == before


def test_cores_that_are_not_available_are_an_error() -> None:
    with pytest.raises(CalibrationError, match="not available"):
        cpu_score([100_000], chunk_ms=1, duration_ms=1)


def _fake_torch(folder: Path, body: str) -> dict[str, str]:
    """An environment whose `import torch` finds `body` first."""
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(body)
    return {"PYTHONPATH": str(folder)}


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("raise ImportError('no torch here')", "torch is not installed"),
        (
            "class device:\n    def __init__(self, name): self.type = name.split(':')[0]\n"
            "class cuda:\n    is_available = staticmethod(lambda: False)\n",
            "no cuda",
        ),
    ],
    ids=["no_torch", "no_cuda"],
)
def test_no_cuda_in_the_gpu_subprocess_is_no_score_not_a_crash(
    tmp_path: Path, body: str, reason: str
) -> None:
    with pytest.raises(GpuUnavailable, match=reason):
        gpu_scores("cuda:0", _fake_torch(tmp_path, body), chunk_ms=5, duration_ms=10)


@pytest.mark.spawns
def test_a_gpu_subprocess_that_fails_is_a_calibration_error(tmp_path: Path) -> None:
    environment = _fake_torch(tmp_path, "import sys\nsys.exit(3)")
    with pytest.raises(CalibrationError, match="exited with 3"):
        gpu_scores("cuda:0", environment, chunk_ms=5, duration_ms=10)


@pytest.mark.spawns
@pytest.mark.slow
def test_the_gpu_workloads_measure_with_real_torch_on_the_cpu() -> None:
    """The subprocess's script end to end (torch imported there, never here), on the CPU with
    small sizes: the same code a cuda device runs, less the synchronisation."""
    scores = gpu_scores(
        "cpu", {}, chunk_ms=5, duration_ms=20, sizes={"gemm_size": 64, "copy_bytes": 1 << 20}
    )
    assert [(s.workload, s.unit) for s in scores] == [
        ("gpu_gemm", "tflop_per_s"),
        ("gpu_copy", "gb_per_s"),
    ]
    assert all(s.score > 0 and s.start_ns < s.end_ns for s in scores)
    assert scores[0].end_ns <= scores[1].start_ns
