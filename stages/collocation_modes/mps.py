"""`mps`: the pipelines share a GPU through NVIDIA MPS, each with its share of the SMs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from stages.collocation_modes.base import CollocationMode, PipelineProblem
from stages.contracts.placement_environment import placement_environment

if TYPE_CHECKING:
    from stages.spec.models import BenchmarkSpec, PipelineSpec, PlacementSpec

MPS_DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"


def mps_pipe_directory() -> Path:
    """Where the MPS control daemon's pipes are (CUDA_MPS_PIPE_DIRECTORY, else its default)."""
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", MPS_DEFAULT_PIPE_DIRECTORY))


class Mps(CollocationMode):
    name = "mps"
    doc = "The pipelines share a GPU through the MPS daemon, each with its placement's SM share."

    def pipeline_problems(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        return self.needs_cuda(pipeline)

    def machine_problems(self, spec: BenchmarkSpec) -> list[str]:
        control = mps_pipe_directory() / "control"
        if control.exists():
            return []
        return [
            f"collocation mode mps needs a running MPS control daemon ({control} not found); "
            "start it with `nvidia-cuda-mps-control -d` (as the GPU's owner), or set "
            "CUDA_MPS_PIPE_DIRECTORY to its pipe directory"
        ]

    def placement_environment(self, device: str, placement: PlacementSpec) -> dict[str, str]:
        return placement_environment(
            device, gpu=placement.gpu, mps_thread_percentage=placement.mps_thread_percentage
        )
