"""The placement environment: the variables a process on a CUDA device is started with so that
it sees only its GPU (or MIG instance) and, under MPS, its share of the SMs. One rule for a
pipeline's worker (stages.collocation.placement, through its collocation mode) and a started
service (stages.services.registry)."""

from __future__ import annotations

from collections.abc import Mapping

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
MPS_ACTIVE_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def placement_environment(
    device: str,
    gpu: int | str | None = None,
    mig: str | None = None,
    mps_thread_percentage: int | None = None,
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of a process on `device` (the MIG instance, else `gpu`, else N of
    `cuda:N`) and its MPS share; nothing for a cpu device. A collocation mode passes only the
    inputs it uses (`mig` in mig mode, the share in mps mode)."""
    environment: dict[str, str] = {}
    if not device.startswith("cuda"):
        return environment
    if mig:
        environment[CUDA_VISIBLE_DEVICES] = mig
    elif gpu is not None:
        environment[CUDA_VISIBLE_DEVICES] = str(gpu)
    elif ":" in device:
        environment[CUDA_VISIBLE_DEVICES] = device.split(":", 1)[1]
    if mps_thread_percentage is not None:
        environment[MPS_ACTIVE_THREAD_PERCENTAGE] = str(mps_thread_percentage)
    return environment


def narrowed_device(device: str, environment: Mapping[str, str]) -> str:
    """The device the process names once `environment` applied: `cuda:0` when
    CUDA_VISIBLE_DEVICES narrowed its view to one device, `device` otherwise, `cpu` for cpu."""
    if not device.startswith("cuda"):
        return "cpu"
    return "cuda:0" if CUDA_VISIBLE_DEVICES in environment else device
