"""The one registry shape every extension point shares (stage types, service types): names map
to entries, a name taken by another class is refused, an unknown name is answered with the
closest registered one and the full list."""

from __future__ import annotations

import difflib
from typing import ClassVar, Generic, TypeVar

EntryT = TypeVar("EntryT")


class NameRegistry(Generic[EntryT]):
    """Names to entries for one extension point; subclasses name the kind and its error."""

    kind: ClassVar[str] = "type"
    """How messages name an entry ("stage type", "service type")."""
    unknown_error: ClassVar[type[KeyError]] = KeyError

    def __init__(self) -> None:
        self._types: dict[str, EntryT] = {}

    def origin(self, entry: EntryT) -> type:
        """The class an entry came from: registering another class under a taken name fails."""
        return type(entry)

    def add(self, name: str, entry: EntryT) -> None:
        existing = self._types.get(name)
        if existing is not None and self.origin(existing) is not self.origin(entry):
            owner = self.origin(existing).__qualname__
            raise ValueError(f"{self.kind} {name!r} is already registered to {owner}")
        self._types[name] = entry

    def get(self, name: str) -> EntryT:
        try:
            return self._types[name]
        except KeyError:
            raise self.unknown_error(self.unknown_message(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def names(self) -> list[str]:
        return sorted(self._types)

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self._types, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; registered: {', '.join(self.names())}"
