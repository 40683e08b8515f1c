"""`time_slice`: the pipelines share the device as the driver schedules them (the default)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.collocation_modes.base import CollocationMode, PipelineProblem

if TYPE_CHECKING:
    from stages.spec.models import PipelineSpec


class TimeSlice(CollocationMode):
    name = "time_slice"
    doc = "The pipelines share the device as its driver time-slices them; no set-up."

    def pipeline_problems(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        return []
