"""Stage registry: names only, entry-point plug-ins, clear errors."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest

from stages.runtime import registry as registry_module
from stages.runtime.registry import StageRegistry, UnknownStageTypeError, default_registry
from tests.helpers import TagStage


def test_entry_point_stages_are_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = importlib.metadata.EntryPoint(
        name="thirdparty.tag", value="tests.helpers:TagStage", group="collobench.stages"
    )
    not_a_stage = importlib.metadata.EntryPoint(
        name="thirdparty.bad", value="tests.helpers:REPO", group="collobench.stages"
    )

    def entry_points(group: str) -> Any:
        return [plugin] if group == "collobench.stages" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry_module, "_REGISTRY", StageRegistry())
    assert default_registry().get("thirdparty.tag") is TagStage

    monkeypatch.setattr(registry_module, "_REGISTRY", StageRegistry())
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [not_a_stage])
    registry = default_registry()  # a plug-in is imported at its first lookup (issue 42, item 6)
    with pytest.raises(TypeError, match=r"thirdparty\.bad.*is not a Stage class"):
        registry.get("thirdparty.bad")


def test_unknown_type_lists_registered_types() -> None:
    registry = StageRegistry()
    registry.register("noop", TagStage)
    with pytest.raises(UnknownStageTypeError, match=r"unknown stage type 'nope'.*registered: noop"):
        registry.get("nope")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("noop", type("Other", (TagStage,), {}))
