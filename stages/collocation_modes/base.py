"""The collocation mode as an extension point: one `CollocationMode` subclass per way the
pipelines share the device, registered by name. A mode says what it needs of each pipeline (the
spec checks), of this machine (checked before a run), and the placement environment a worker
starts with. The spec models only name their types here (stages.spec imports this package)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from stages.contracts.errors import InvalidInputError
from stages.contracts.placement_environment import placement_environment
from stages.name_registry import NameRegistry

if TYPE_CHECKING:
    from stages.spec.models import BenchmarkSpec, PipelineSpec, PlacementSpec

Location = tuple[int | str, ...]
"""A location inside one pipeline of the spec, e.g. ('placement', 'cpus')."""
PipelineProblem = tuple[Location, str]


class CollocationMode(ABC):
    """One way the pipelines share the device (`collocation.mode` of a spec)."""

    name: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    """One line: what the mode does (docs, `collobench schema`)."""

    @abstractmethod
    def pipeline_problems(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        """(location in the pipeline, message) for each way `pipeline` does not fit the mode."""

    def machine_problems(self, spec: BenchmarkSpec) -> list[str]:
        """What this machine lacks for the mode, one line each (empty: it can run here)."""
        return []

    def placement_environment(self, device: str, placement: PlacementSpec) -> dict[str, str]:
        """The CUDA variables a worker on `device` starts with: the GPU its placement names."""
        return placement_environment(device, gpu=placement.gpu)

    def needs_cuda(self, pipeline: PipelineSpec) -> list[PipelineProblem]:
        """The problem of a mode that shares a GPU, for a pipeline that runs on the CPU."""
        if pipeline.device.startswith("cuda"):
            return []
        return [(("device",), f"collocation mode {self.name} needs a cuda device")]


class UnknownCollocationModeError(InvalidInputError, KeyError):
    """A name that no registered collocation mode has."""


class CollocationModeRegistry(NameRegistry[CollocationMode]):
    """Collocation mode names to modes."""

    kind = "collocation mode"
    unknown_error = UnknownCollocationModeError

    def register(self, mode_class: type[CollocationMode]) -> None:
        self.add(mode_class.name, mode_class())
