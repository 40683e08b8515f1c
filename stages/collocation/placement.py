"""Where a pipeline's worker runs: environment and CPU affinity, applied before torch or CUDA
initialise in the worker, and the checks each collocation mode needs before a run starts."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from stages.contracts.errors import InvalidInputError
from stages.spec.models import BenchmarkSpec, PipelineSpec

MPS_DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"


class PlacementError(InvalidInputError, RuntimeError):
    """A collocation mode or placement that cannot work on this machine, with what to do."""


def worker_environment(pipeline: PipelineSpec, mode: str) -> dict[str, str]:
    """Environment variables the worker sets for itself before importing torch."""
    placement = pipeline.placement
    environment: dict[str, str] = {}
    if pipeline.device.startswith("cuda"):
        if mode == "mig" and placement.mig:
            environment["CUDA_VISIBLE_DEVICES"] = placement.mig
        elif placement.gpu is not None:
            environment["CUDA_VISIBLE_DEVICES"] = str(placement.gpu)
        elif ":" in pipeline.device:
            environment["CUDA_VISIBLE_DEVICES"] = pipeline.device.split(":", 1)[1]
        if mode == "mps" and placement.mps_thread_percentage is not None:
            environment["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(placement.mps_thread_percentage)
    if placement.threads is not None:
        # Read by OpenMP/MKL when torch loads; torch.set_num_threads is applied as well.
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            environment[name] = str(placement.threads)
    return environment


def torch_device(pipeline: PipelineSpec, mode: str) -> str:
    """The device string stages should use once CUDA_VISIBLE_DEVICES narrowed the view."""
    if not pipeline.device.startswith("cuda"):
        return "cpu"
    narrowed = "CUDA_VISIBLE_DEVICES" in worker_environment(pipeline, mode)
    return "cuda:0" if narrowed else pipeline.device


def apply_cpu_affinity(cpus: list[int] | None) -> None:
    """Pin the calling process (all its future threads) to `cpus`."""
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        return
    available = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - available)
    if missing:
        raise PlacementError(
            f"cpus {missing} are not available to this process (available: {sorted(available)})"
        )
    os.sched_setaffinity(0, cpus)


# The Linux scheduling policy each `placement.scheduling_policy` names.
SCHEDULING_POLICIES: dict[str, int] = {
    "other": getattr(os, "SCHED_OTHER", 0),
    "batch": getattr(os, "SCHED_BATCH", 3),
}


def apply_scheduling_policy(policy: str) -> None:
    """Give the calling thread `policy`; threads it starts afterwards inherit it, so the
    worker applies it before its first thread. The default leaves the process untouched."""
    if policy == "other":
        return
    if not hasattr(os, "sched_setscheduler"):
        raise PlacementError(f"scheduling_policy '{policy}' needs Linux (sched_setscheduler)")
    try:
        os.sched_setscheduler(0, SCHEDULING_POLICIES[policy], os.sched_param(0))
    except OSError as error:
        raise PlacementError(f"scheduling_policy '{policy}' was refused: {error}") from error


def mps_pipe_directory() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", MPS_DEFAULT_PIPE_DIRECTORY))


def check_collocation(spec: BenchmarkSpec, gpu_count: int | None) -> list[str]:
    """Problems that make the spec's collocation mode impossible here (empty = fine).

    `gpu_count` is what NVML reports (None when NVML is unavailable).
    """
    problems = _check_gpu_visible(spec, gpu_count)
    mode_check = _MODE_CHECKS.get(spec.collocation.mode)
    if mode_check is not None:
        problems += mode_check(spec)
    return problems


def _check_gpu_visible(spec: BenchmarkSpec, gpu_count: int | None) -> list[str]:
    uses_cuda = any(pipeline.device.startswith("cuda") for pipeline in spec.pipelines)
    if uses_cuda and not gpu_count:
        return [
            "a pipeline asks for a cuda device but no NVIDIA GPU is visible (NVML found none); "
            "use device: cpu or run on a GPU machine"
        ]
    return []


def _check_mps(spec: BenchmarkSpec) -> list[str]:
    control = mps_pipe_directory() / "control"
    if control.exists():
        return []
    return [
        f"collocation mode mps needs a running MPS control daemon ({control} not found); "
        "start it with `nvidia-cuda-mps-control -d` (as the GPU's owner), or set "
        "CUDA_MPS_PIPE_DIRECTORY to its pipe directory"
    ]


def _check_mig(spec: BenchmarkSpec) -> list[str]:
    return [
        f"pipeline '{pipeline.name}': placement.mig must be a MIG instance UUID "
        "(MIG-...; list them with `nvidia-smi -L`)"
        for pipeline in spec.pipelines
        if not (pipeline.placement.mig or "").startswith("MIG-")
    ]


def _check_cpu_pinned(spec: BenchmarkSpec) -> list[str]:
    problems: list[str] = []
    seen: dict[int, str] = {}
    available = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    for pipeline in spec.pipelines:
        for cpu in pipeline.placement.cpus or []:
            if available and cpu not in available:
                problems.append(
                    f"pipeline '{pipeline.name}': cpu {cpu} is not available here "
                    f"(available: {sorted(available)})"
                )
            if cpu in seen:
                problems.append(
                    f"cpu_pinned: cpu {cpu} is given to both '{seen[cpu]}' and "
                    f"'{pipeline.name}'; use time_slice to share cores"
                )
            seen[cpu] = pipeline.name
    return problems


# The checks each collocation mode needs beyond a visible GPU (modes not named need none).
_MODE_CHECKS: dict[str, Callable[[BenchmarkSpec], list[str]]] = {
    "mps": _check_mps,
    "mig": _check_mig,
    "cpu_pinned": _check_cpu_pinned,
}
