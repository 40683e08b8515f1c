"""`mig`: each pipeline runs on a MIG instance of its own (hardware partitions of one GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.collocation_modes.base import CollocationMode, PipelineProblem
from stages.contracts.placement_environment import placement_environment

if TYPE_CHECKING:
    from stages.spec.models import BenchmarkSpec, PipelineSpec, PlacementSpec


class Mig(CollocationMode):
    name = "mig"
    doc = "Each pipeline runs on its own MIG instance of the GPU (placement.mig)."

    def pipeline_problems(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        problems = self.needs_cuda(pipeline)
        if not pipeline.placement.mig:
            location = ("placement", "mig")
            problems.append(
                (location, "collocation mode mig needs a MIG instance UUID per pipeline")
            )
        return problems

    def machine_problems(self, spec: BenchmarkSpec) -> list[str]:
        return [
            f"pipeline '{pipeline.name}': placement.mig must be a MIG instance UUID "
            "(MIG-...; list them with `nvidia-smi -L`)"
            for pipeline in spec.pipelines
            if not (pipeline.placement.mig or "").startswith("MIG-")
        ]

    def placement_environment(self, device: str, placement: PlacementSpec) -> dict[str, str]:
        return placement_environment(device, gpu=placement.gpu, mig=placement.mig)
