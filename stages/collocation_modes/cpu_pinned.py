"""`cpu_pinned`: each pipeline runs on CPU cores of its own (placement.cpus)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from stages.collocation_modes.base import CollocationMode, PipelineProblem

if TYPE_CHECKING:
    from stages.spec.models import BenchmarkSpec, PipelineSpec


class CpuPinned(CollocationMode):
    name = "cpu_pinned"
    doc = "Each pipeline runs on CPU cores no other pipeline has (placement.cpus)."

    def pipeline_problems(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        if pipeline.placement.cpus is not None:
            return []
        return [
            (("placement", "cpus"), "collocation mode cpu_pinned needs cpus for every pipeline")
        ]

    def machine_problems(self, spec: BenchmarkSpec) -> list[str]:
        """Every core is available here and given to one pipeline only."""
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
