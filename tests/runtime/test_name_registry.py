"""NameRegistry, the shape every extension point shares: entry-point plug-ins found once,
imported when first looked up and checked against the registry's base class, and an unknown name
answered with the known ones."""

from __future__ import annotations

import importlib.metadata
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import pytest

from stages.name_registry import NameRegistry

GROUP = "collobench.test_mappings"


class UnknownMappingTypeError(KeyError):
    """The test registry's unknown-name error."""


class MappingTypes(NameRegistry[type[Mapping[Any, Any]]]):
    """A registry of mapping classes: any stdlib class can be an entry point's target."""

    kind = "mapping type"
    unknown_error = UnknownMappingTypeError
    plugin_base = Mapping

    def origin(self, entry: type[Mapping[Any, Any]]) -> type:
        return entry

    def add_plugin(self, name: str, plugin_class: type[Any]) -> None:
        self.add(name, plugin_class)


def _install(monkeypatch: pytest.MonkeyPatch, **targets: str) -> list[str]:
    """Entry points of GROUP named by keyword, each `module:attribute`; returns the groups
    asked for, one per lookup."""
    asked: list[str] = []

    def entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
        asked.append(group)
        if group != GROUP:
            return []
        return [
            importlib.metadata.EntryPoint(name=name, value=value, group=group)
            for name, value in targets.items()
        ]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return asked


def test_entry_points_of_a_group_are_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _install(monkeypatch, ordered="collections:OrderedDict")
    registry = MappingTypes()
    registry.load_entry_points(GROUP)
    registry.load_entry_points(GROUP)
    assert registry.get("ordered") is OrderedDict
    assert registry.names() == ["ordered"]
    assert asked == [GROUP]  # the second call found the group loaded


def test_an_entry_point_of_the_wrong_class_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, queue="collections:deque")
    registry = MappingTypes()
    registry.load_entry_points(GROUP)
    with pytest.raises(TypeError, match=rf"'queue' in {GROUP} is not a Mapping class"):
        registry.get("queue")


def test_a_registry_without_a_plugin_base_takes_no_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _install(monkeypatch, ordered="collections:OrderedDict")
    registry = NameRegistry[type]()
    registry.load_entry_points(GROUP)
    with pytest.raises(TypeError, match=r"'ordered' in .* is not a type class"):
        registry.get("ordered")


def test_a_plugin_is_imported_only_when_its_name_is_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec's stages import their own modules, not every plug-in's: one that cannot even be
    imported costs nothing until it is named (then its error says why)."""
    _install(monkeypatch, ordered="collections:OrderedDict", broken="no_such_module_xyz:Thing")
    registry = MappingTypes()
    registry.load_entry_points(GROUP)
    assert registry.names() == ["broken", "ordered"] and "broken" in registry
    assert registry.get("ordered") is OrderedDict
    with pytest.raises(ModuleNotFoundError, match="no_such_module_xyz"):
        registry.get("broken")


def test_an_unknown_name_gets_the_closest_and_every_registered_one() -> None:
    registry = MappingTypes()
    registry.add("ordered", OrderedDict)
    registry.add("plain", dict)
    with pytest.raises(
        UnknownMappingTypeError,
        match=r"unknown mapping type 'orderd' \(did you mean 'ordered'\?\); registered: "
        r"ordered, plain",
    ):
        registry.get("orderd")
    assert registry.entries() == {"ordered": OrderedDict, "plain": dict}
    with pytest.raises(ValueError, match="'plain' is already registered to dict"):
        registry.add("plain", OrderedDict)
