"""Calibration workloads: a short fixed reference workload whose score says how fast a set of
cores (or a GPU) ran at one moment, so that runs can be compared across time and machines.
Higher is faster; the score of a workload is its work per second, the median over short
chunks (one preempted chunk does not move it).

`cpu_loop`: rounds of a fixed single-threaded job, on the given cores: a pure-Python integer
loop (LOOP_STEPS steps) and MATMULS products of two MATRIX_SIZE x MATRIX_SIZE float32
matrices (numpy; this size stays under OpenBLAS's threshold for threads, so the product runs
in the calling thread). It runs in a short-lived thread of the calling process pinned with
`os.sched_setaffinity(threading.get_native_id(), cpus)` (Linux pins one thread; the caller's
own affinity and the children it spawns later are untouched). Each chunk runs whole rounds
until `chunk_ms` have passed; its score is rounds per second, in thousands (`kloops_per_s`).
It holds the GIL for the integer loop: another busy Python thread in the same process would
lower the score, as a busy process on the same cores does.

`gpu_gemm` and `gpu_copy` (a cuda device): a short-lived subprocess (`python -c`, a fresh
interpreter: torch is never imported here, and no process that touched CUDA is forked)
multiplies two GEMM_SIZE x GEMM_SIZE float16 matrices (TFLOP/s: 2 n^3 per product) and copies
COPY_BYTES from one device buffer to another (GB/s of bytes read plus written), each after a
warm-up, in chunks of a fixed number of iterations sized from one timed iteration to last
about `chunk_ms`, timed with a device synchronisation. Importing torch and initialising CUDA
cost seconds, so a GPU calibration costs that much more than its `duration_ms`. A subprocess
that finds no CUDA (or no torch) reports why, and there is no GPU score: `GpuUnavailable`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from stages.contracts.errors import RunFailedError

LOOP_STEPS = 500
MATMULS = 8
MATRIX_SIZE = 48
CPU_UNIT = "kloops_per_s"
GEMM_SIZE = 4096
COPY_BYTES = 256 * 1024 * 1024
GPU_TIMEOUT_S = 120.0
"""The GPU subprocess's limit: importing torch and initialising CUDA on a loaded machine."""


@dataclass(frozen=True)
class Score:
    """One workload's score, and when it ran (monotonic clock, like the run's tables)."""

    workload: str  # cpu_loop | gpu_gemm | gpu_copy
    score: float  # higher = faster
    unit: str
    start_ns: int
    end_ns: int


class CalibrationError(RunFailedError, RuntimeError):
    """A calibration could not run (cores not available, a subprocess that failed)."""


class GpuUnavailable(CalibrationError):
    """The GPU calibration found no CUDA device (or no torch): no GPU score."""


def _chunks(chunk_ms: float, duration_ms: float) -> int:
    return max(1, round(duration_ms / chunk_ms))


def _cpu_chunk_scores(chunk_ms: float, duration_ms: float) -> list[float]:
    """Rounds per second (thousands) of each chunk, in the calling thread."""
    import numpy

    generator = numpy.random.default_rng(0)
    left = generator.random((MATRIX_SIZE, MATRIX_SIZE), dtype=numpy.float32)
    right = generator.random((MATRIX_SIZE, MATRIX_SIZE), dtype=numpy.float32)
    product = numpy.empty_like(left)
    scores = []
    for _ in range(_chunks(chunk_ms, duration_ms)):
        began_ns = time.perf_counter_ns()
        deadline_ns = began_ns + int(chunk_ms * 1e6)
        rounds = 0
        while True:
            value = 1
            for step in range(LOOP_STEPS):
                value = (value * 31 + step) & 0xFFFF
            for _ in range(MATMULS):
                numpy.matmul(left, right, out=product)
            rounds += 1
            now_ns = time.perf_counter_ns()
            if now_ns >= deadline_ns:
                break
        scores.append(rounds / ((now_ns - began_ns) / 1e9) / 1e3)
    return scores


def cpu_score(cpus: Collection[int] | None, chunk_ms: float, duration_ms: float) -> Score:
    """The `cpu_loop` score on `cpus` (None: every core this process may use; those not
    available here are left out), in a thread pinned to them: single-threaded, it measures
    the core of them the scheduler gives it. CalibrationError when none is available."""
    allowed = os.sched_getaffinity(0)
    cores = allowed if cpus is None else set(cpus) & allowed
    if not cores:
        raise CalibrationError(f"cpus {sorted(cpus or [])} are not available here")
    outcome: list[list[float] | BaseException] = []

    def measure() -> None:
        try:
            os.sched_setaffinity(threading.get_native_id(), cores)
            outcome.append(_cpu_chunk_scores(chunk_ms, duration_ms))
        except BaseException as error:  # handed to the caller's thread
            outcome.append(error)

    start_ns = time.monotonic_ns()
    thread = threading.Thread(target=measure, name="calibration", daemon=True)
    thread.start()
    thread.join()
    end_ns = time.monotonic_ns()
    if isinstance(outcome[0], BaseException):
        raise CalibrationError(f"cpu_loop failed: {outcome[0]!r}") from outcome[0]
    return Score("cpu_loop", statistics.median(outcome[0]), CPU_UNIT, start_ns, end_ns)


_GPU_SCRIPT = """
import json, statistics, sys, time
settings = json.loads(sys.argv[1])
try:
    import torch
except ImportError:
    print(json.dumps({"unavailable": "torch is not installed"}))
    sys.exit(0)
device = torch.device(settings["device"])
if device.type == "cuda" and not torch.cuda.is_available():
    print(json.dumps({"unavailable": "no cuda"}))
    sys.exit(0)

def sync():
    if device.type == "cuda":
        torch.cuda.synchronize(device)

def timed(step, work_per_step, unit, scale):
    for _ in range(3):  # warm-up: kernels chosen, clocks up
        step()
    sync()
    began = time.perf_counter()
    step()
    sync()
    one_s = max(time.perf_counter() - began, 1e-6)
    per_chunk = max(1, int(settings["chunk_ms"] / 1e3 / one_s))
    chunks = max(1, round(settings["duration_ms"] / settings["chunk_ms"]))
    start_ns, scores = time.monotonic_ns(), []
    for _ in range(chunks):
        began = time.perf_counter()
        for _ in range(per_chunk):
            step()
        sync()
        scores.append(work_per_step * per_chunk / (time.perf_counter() - began) / scale)
    return {"score": statistics.median(scores), "unit": unit, "start_ns": start_ns,
            "end_ns": time.monotonic_ns()}

n = settings["gemm_size"]
a = torch.randn(n, n, device=device, dtype=torch.float16)
b = torch.randn(n, n, device=device, dtype=torch.float16)
c = torch.empty(n, n, device=device, dtype=torch.float16)
gemm = timed(lambda: torch.mm(a, b, out=c), 2 * n ** 3, "tflop_per_s", 1e12)
del a, b, c
source = torch.empty(settings["copy_bytes"], device=device, dtype=torch.uint8)
target = torch.empty_like(source)
copy = timed(lambda: target.copy_(source), 2 * settings["copy_bytes"], "gb_per_s", 1e9)
print(json.dumps({"gpu_gemm": gemm, "gpu_copy": copy}))
"""


def gpu_scores(
    device: str,
    environment: Mapping[str, str],
    chunk_ms: float,
    duration_ms: float,
    sizes: Mapping[str, int] | None = None,
) -> list[Score]:
    """`gpu_gemm` and `gpu_copy` on `device` (as torch names it once `environment`, the
    pipeline's placement variables, narrowed the view), in a short-lived subprocess;
    GpuUnavailable when it finds no CUDA, CalibrationError when it fails. `sizes` replaces
    `gemm_size` or `copy_bytes` (tests on the CPU only)."""
    settings = {"device": device, "chunk_ms": chunk_ms, "duration_ms": duration_ms}
    settings |= {"gemm_size": GEMM_SIZE, "copy_bytes": COPY_BYTES, **(sizes or {})}
    process = subprocess.Popen(
        [sys.executable, "-c", _GPU_SCRIPT, json.dumps(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **environment},
        text=True,
    )
    try:
        output, errors = process.communicate(timeout=GPU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"the GPU calibration took over {GPU_TIMEOUT_S:.0f} s") from None
    finally:
        if process.poll() is None:  # timed out or interrupted: never leave it behind
            process.kill()
            process.communicate()
    lines = output.strip().splitlines()
    if process.returncode != 0 or not lines:
        last = (errors.strip().splitlines() or ["no output"])[-1]
        raise CalibrationError(f"the GPU calibration exited with {process.returncode}: {last}")
    found = json.loads(lines[-1])
    if "unavailable" in found:
        raise GpuUnavailable(f"no GPU score: {found['unavailable']}")
    return [
        Score(name, float(part["score"]), part["unit"], part["start_ns"], part["end_ns"])
        for name, part in found.items()
    ]
