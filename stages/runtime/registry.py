"""Registry of stage types: specs may name only what is registered here (never import paths).

Every stage type, builtin, library or third-party, comes in through the `collobench.stages`
entry point group (`name = "pkg.module:StageClass"`); this distribution lists its own in
pyproject.toml. The runtime therefore knows no concrete stage. `stage_type` registers a class
by hand (tests, notebooks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stages.contracts.errors import InvalidInputError
from stages.name_registry import NameRegistry
from stages.runtime.stage import Stage

ENTRY_POINT_GROUP = "collobench.stages"

StageT = TypeVar("StageT", bound=type[Stage[Any]])


class UnknownStageTypeError(InvalidInputError, KeyError):
    """A spec named a stage type that is not registered."""


class StageRegistry(NameRegistry[type[Stage[Any]]]):
    """Maps stage type names to `Stage` subclasses."""

    kind = "stage type"
    unknown_error = UnknownStageTypeError
    plugin_base = Stage

    def origin(self, entry: type[Stage[Any]]) -> type:
        return entry

    def register(self, name: str, stage_class: type[Stage[Any]]) -> None:
        self.add(name, stage_class)

    def add_plugin(self, name: str, plugin_class: type[Any]) -> None:
        self.register(name, plugin_class)


_REGISTRY = StageRegistry()


def stage_type(name: str) -> Callable[[StageT], StageT]:
    """Class decorator: register a `Stage` subclass under `name` in the default registry."""

    def register(stage_class: StageT) -> StageT:
        _REGISTRY.register(name, stage_class)
        return stage_class

    return register


def default_registry() -> StageRegistry:
    """The registry with every installed entry-point stage loaded (once)."""
    _REGISTRY.load_entry_points(ENTRY_POINT_GROUP)
    return _REGISTRY
