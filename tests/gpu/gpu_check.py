"""`make gpu-check`: what collobench's GPU paths do on a real NVIDIA GPU, checked and printed.

One line per check (`ok`, `FAIL` or `skip`, with its figures), then one JSON line with
everything (also written to the file `$GPU_CHECK_OUT` when that variable is set). Exit 1 when
a check failed; 0 otherwise, including on a machine without a GPU, where every check is
`skip` with the reason. Needs only what `stages` and `analysis` need (no Dagster, no MLflow:
runs pass --no-mlflow), with the repository on PYTHONPATH and its egg-info generated in place.

Checks:
- nvml.*: the real pynvml backend: devices, power (and which field), memory used under an
  allocation, the total-energy counter under ~2 s of matmuls against the integral of power
  sampled every 20 ms (within ENERGY_TOLERANCE), per-process utilisation seeing our pid.
- cuda.placement: a worker's environment for `device: cuda:N` makes torch see that one GPU.
- cuda.sync: `device_synchronizer("cuda")`: matmuls timed without it (only queued) and with it.
- sampler.end_to_end: a short cuda spec through the CLI; gpu_samples has nvml_counter rows.
- mps: with an MPS daemon, a tiny mps spec runs; without, the launcher refuses it (as designed).
- spec.<name>: shipped model specs with every pipeline (and every started service) on cuda:
  status, p99, queries/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from stages.telemetry.gpu_backend import GpuBackend, GpuError, GpuUnavailableError
from tests.gpu.check import FAIL, SKIP, Check, guarded, skip_all
from tests.gpu.cli_checks import check_model_spec, check_mps, check_sampler
from tests.gpu.cuda_checks import check_placement, check_sync
from tests.gpu.nvml_checks import (
    EnergyTrace,
    check_devices,
    check_energy,
    check_memory,
    check_power,
    check_process_utilization,
)

CHECK_NAMES = (
    "nvml.devices",
    "nvml.power",
    "nvml.memory",
    "nvml.energy_counter",
    "nvml.process_utilization",
    "cuda.placement",
    "cuda.sync",
    "sampler.end_to_end",
    "mps",
)
MODEL_SPECS = ("demo", "vision_collocated", "llm_generate", "served_llm")
SPEC_DURATION_S = 5.0


def open_backend() -> tuple[GpuBackend | None, str]:
    """Real NVML (never the fake: this checks hardware); None and why when there is none."""
    from stages.telemetry.nvml_backend import NvmlBackend

    try:
        backend = NvmlBackend()
    except GpuUnavailableError as error:
        return None, f"no NVIDIA GPU here ({error})"
    try:
        count = backend.device_count()
    except GpuError as error:
        backend.shutdown()
        return None, f"no NVIDIA GPU here (cannot count devices: {error})"
    if not count:
        backend.shutdown()
        return None, "no NVIDIA GPU here (NVML reports no device)"
    return backend, ""


TORCH_CHECKS = (
    "nvml.memory",
    "nvml.energy_counter",
    "nvml.process_utilization",
    "cuda.placement",
    "cuda.sync",
)
"""The checks that need torch on CUDA (each `skip` with the reason without it)."""


def cuda_torch() -> tuple[Any, str]:
    """torch when it sees a CUDA device; None and why not otherwise."""
    try:
        import torch
    except ImportError as error:
        return None, f"torch is not importable: {error}"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, ""


def allocator(torch: Any) -> Callable[[int], Any]:
    """Allocates MiB on the GPU and holds them (touched and synchronised) while referenced."""

    def allocate_mib(mib: int) -> Any:
        tensor = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
        tensor.fill_(1)
        torch.cuda.synchronize()
        return tensor

    return allocate_mib


def matmul_load(torch: Any) -> Callable[[float], None]:
    """Keeps the GPU busy with 4096x4096 matmuls for the seconds given."""

    def load(seconds: float) -> None:
        a = torch.randn(4096, 4096, device="cuda")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()

    return load


def torch_checks(backend: GpuBackend, torch: Any) -> list[Check]:
    """The checks of TORCH_CHECKS, in that order."""
    torch.ones(1, device="cuda")  # the context exists before memory is compared
    torch.cuda.synchronize()
    checks = [guarded("nvml.memory", lambda: check_memory(backend, allocator(torch)))]
    torch.cuda.empty_cache()
    try:
        energy, trace = check_energy(backend, matmul_load(torch))
    except Exception as error:
        energy = Check("nvml.energy_counter", FAIL, f"raised {type(error).__name__}: {error}")
        trace = EnergyTrace(process_error="the energy check did not run")
    checks.append(energy)
    checks.append(check_process_utilization(trace, os.getpid()))
    checks.append(guarded("cuda.placement", lambda: check_placement(backend)))
    checks.append(guarded("cuda.sync", lambda: check_sync(torch)))
    return checks


def device_checks(backend: GpuBackend, environment: dict[str, Any]) -> list[Check]:
    """The checks on the open NVML backend (and torch); the GPU and torch into `environment`."""
    checks = [check_devices(backend), check_power(backend)]
    torch, reason = cuda_torch()
    if torch is not None:
        environment.update({"torch": torch.__version__, "cuda": torch.version.cuda})
    environment["gpu"] = backend.name(0)
    if torch is None:
        return checks + skip_all(list(TORCH_CHECKS), reason)
    return checks + torch_checks(backend, torch)


def run_checks(
    specs: list[str], spec_duration_s: float, work_dir: Path | None = None
) -> tuple[list[Check], dict[str, Any]]:
    """Every check in order; the CLI runs' folders go under `work_dir` (default: a new
    temporary folder, kept so their run directories can be inspected afterwards)."""
    names = list(CHECK_NAMES) + [f"spec.{name}" for name in specs]
    environment: dict[str, Any] = {"python": sys.version.split()[0]}
    os.environ.pop("COLLOBENCH_FAKE_NVML", None)  # the CLI runs below must see the real GPU
    backend, reason = open_backend()
    if backend is None:
        return skip_all(names, reason), environment
    try:
        checks = device_checks(backend, environment)
    finally:
        backend.shutdown()
    work = work_dir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    environment["work_dir"] = str(work)
    checks.append(guarded("sampler.end_to_end", lambda: check_sampler(work)))
    checks.append(guarded("mps", lambda: check_mps(work)))
    for name in specs:
        checks.append(
            guarded(f"spec.{name}", partial(check_model_spec, name, work, spec_duration_s))
        )
    return checks, environment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--specs",
        nargs="*",
        default=list(MODEL_SPECS),
        help="spec names under specs/ to run on cuda (default: %(default)s)",
    )
    parser.add_argument(
        "--spec-duration-s",
        type=float,
        default=SPEC_DURATION_S,
        help="cap on each pipeline's loadgen.duration_s in those runs",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the CLI runs' run directories go (default: a new temporary folder, kept)",
    )
    arguments = parser.parse_args(argv)
    started = time.monotonic()
    checks, environment = run_checks(arguments.specs, arguments.spec_duration_s, arguments.work_dir)
    for check in checks:
        print(check.line(), flush=True)
    failed = [check.name for check in checks if check.status == FAIL]
    if all(check.status == SKIP for check in checks):
        print(f"no GPU checks ran: {checks[0].detail}" if checks else "no checks", flush=True)
    report = {
        "benchmark": "gpu_check",
        "ok": not failed,
        "failed": failed,
        "environment": environment,
        "elapsed_s": round(time.monotonic() - started, 1),
        "checks": [asdict(check) for check in checks],
    }
    line = json.dumps(report, default=str)
    print(line, flush=True)
    target = os.environ.get("GPU_CHECK_OUT")
    if target:
        Path(target).write_text(line + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
