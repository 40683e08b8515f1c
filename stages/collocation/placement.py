"""Where a pipeline's worker runs: environment and CPU affinity, applied before torch or CUDA
initialise in the worker, and the machine checks of the run's collocation mode (stages.
collocation_modes) before a run starts."""

from __future__ import annotations

import os

from stages.collocation_modes import COLLOCATION_MODES
from stages.contracts.errors import InvalidInputError
from stages.contracts.placement_environment import narrowed_device
from stages.spec.models import BenchmarkSpec, PipelineSpec


class PlacementError(InvalidInputError, RuntimeError):
    """A collocation mode or placement that cannot work on this machine, with what to do."""


def worker_environment(pipeline: PipelineSpec, mode: str) -> dict[str, str]:
    """Environment variables the worker sets for itself before importing torch: the CUDA
    placement its collocation mode gives it, and its thread counts."""
    mode_of_run = COLLOCATION_MODES.get(mode)
    environment = mode_of_run.placement_environment(pipeline.device, pipeline.placement)
    threads = pipeline.placement.threads
    if threads is not None:
        # Read by OpenMP/MKL when torch loads; torch.set_num_threads is applied as well.
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            environment[name] = str(threads)
    return environment


def torch_device(pipeline: PipelineSpec, mode: str) -> str:
    """The device string stages should use once CUDA_VISIBLE_DEVICES narrowed the view."""
    return narrowed_device(pipeline.device, worker_environment(pipeline, mode))


_inherited_cpus: set[int] | None = None
"""The cores this process had before its first placement: a resident worker (an A/B session's)
pinned to one half of the cores for one run may be given the other half for the next."""


def apply_cpu_affinity(cpus: list[int] | None) -> None:
    """Pin the calling process (all its future threads) to `cpus`; None: the cores it started
    with (unpinned, or unpinned again after an earlier run pinned it)."""
    global _inherited_cpus
    if not hasattr(os, "sched_setaffinity"):
        return
    if _inherited_cpus is None:
        _inherited_cpus = os.sched_getaffinity(0)
    available = _inherited_cpus
    if cpus is None:
        if os.sched_getaffinity(0) != available:
            os.sched_setaffinity(0, available)
        return
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


def check_collocation(spec: BenchmarkSpec, gpu_count: int | None) -> list[str]:
    """Problems that make the spec's collocation mode impossible here (empty = fine).

    `gpu_count` is what NVML reports (None when NVML is unavailable).
    """
    mode = COLLOCATION_MODES.get(spec.collocation.mode)
    return _check_gpu_visible(spec, gpu_count) + mode.machine_problems(spec)


def _check_gpu_visible(spec: BenchmarkSpec, gpu_count: int | None) -> list[str]:
    uses_cuda = any(pipeline.device.startswith("cuda") for pipeline in spec.pipelines)
    if uses_cuda and not gpu_count:
        return [
            "a pipeline asks for a cuda device but no NVIDIA GPU is visible (NVML found none); "
            "use device: cpu or run on a GPU machine"
        ]
    return []
