"""The one registry shape every extension point shares (stage types, service types, artefacts):
names map to entries, a name taken by another class is refused, an unknown name is answered with
the closest registered one and the full list, and plug-ins come in through an entry point group,
each imported when its name is first looked up (a run's worker imports the stages it runs, not
the whole library: ~1 s of start-up in every process)."""

from __future__ import annotations

import difflib
import importlib.metadata
from typing import Any, ClassVar, Generic, TypeVar

EntryT = TypeVar("EntryT")


class NameRegistry(Generic[EntryT]):
    """Names to entries for one extension point; subclasses name the kind and its error."""

    kind: ClassVar[str] = "type"
    """How messages name an entry ("stage type", "service type")."""
    unknown_error: ClassVar[type[Exception]] = KeyError
    plugin_base: ClassVar[type[Any] | None] = None
    """The class an entry point must load (a subclass of); None: this registry takes no plug-ins."""

    def __init__(self) -> None:
        self._types: dict[str, EntryT] = {}
        self._loaded_groups: set[str] = set()
        self._entry_points: dict[str, importlib.metadata.EntryPoint] = {}
        """Every plug-in found, by name: loaded into `_types` on first use."""

    def origin(self, entry: EntryT) -> type:
        """The class an entry came from: registering another class under a taken name fails."""
        return type(entry)

    def add(self, name: str, entry: EntryT) -> None:
        existing = self._types.get(name)
        if existing is not None and self.origin(existing) is not self.origin(entry):
            owner = self.origin(existing).__qualname__
            raise ValueError(f"{self.kind} {name!r} is already registered to {owner}")
        self._types[name] = entry

    def add_plugin(self, name: str, plugin_class: type[Any]) -> None:
        """Register the `plugin_base` subclass that entry point `name` loaded."""
        raise NotImplementedError(f"a {self.kind} registry takes no plug-ins")

    def load_entry_points(self, group: str) -> None:
        """Register every installed entry point of `group` (`name = "pkg.module:Class"`), once:
        installing a package is how a third party extends the benchmark. Each is imported, and
        checked against `plugin_base`, when its name is first looked up."""
        if group in self._loaded_groups:
            return
        self._loaded_groups.add(group)
        for entry_point in importlib.metadata.entry_points(group=group):
            self._entry_points.setdefault(entry_point.name, entry_point)

    def _load(self, name: str) -> None:
        """Import the plug-in of entry point `name`, check its class and register it."""
        entry_point = self._entry_points[name]
        loaded = entry_point.load()
        base = self.plugin_base
        if base is None or not (isinstance(loaded, type) and issubclass(loaded, base)):
            expected = base.__name__ if base is not None else self.kind
            raise TypeError(
                f"entry point {entry_point.name!r} in {entry_point.group} is not a {expected} class"
            )
        self.add_plugin(name, loaded)

    def get(self, name: str) -> EntryT:
        if name not in self._types and name in self._entry_points:
            self._load(name)
        try:
            return self._types[name]
        except KeyError:
            raise self.unknown_error(self.unknown_message(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._types or name in self._entry_points

    def names(self) -> list[str]:
        return sorted(set(self._types) | set(self._entry_points))

    def entries(self) -> dict[str, EntryT]:
        """Every name with its entry, sorted by name (a copy: registering goes through `add`);
        every plug-in is imported."""
        return {name: self.get(name) for name in self.names()}

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; registered: {', '.join(self.names())}"
