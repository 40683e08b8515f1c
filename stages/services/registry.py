"""Registry of service types: a spec's `services[].type` may name only what is registered here.

The built-in types (`stages.services.builders`) are registered here; third-party types come in
through the `collobench.services` entry point group (`name = "pkg.module:Class"`). What a type
is: `stages.services.service_type`.
"""

from __future__ import annotations

from typing import Any

from stages.contracts.errors import InvalidInputError
from stages.name_registry import NameRegistry
from stages.services.builders import BUILT_IN_SERVICE_TYPES
from stages.services.service_type import ServiceType

ENTRY_POINT_GROUP = "collobench.services"


class UnknownServiceTypeError(InvalidInputError, KeyError):
    """A spec named a service type that is not registered."""


class ServiceRegistry(NameRegistry[ServiceType]):
    """Maps service type names to `ServiceType` instances."""

    kind = "service type"
    unknown_error = UnknownServiceTypeError
    plugin_base = ServiceType

    def register(self, service_class: type[ServiceType]) -> None:
        self.add(service_class.name, service_class())

    def add_plugin(self, name: str, plugin_class: type[Any]) -> None:
        """A service type registers under its own `name`, whatever its entry point is called."""
        self.register(plugin_class)


def _built_in_registry() -> ServiceRegistry:
    registry = ServiceRegistry()
    for service_class in BUILT_IN_SERVICE_TYPES:
        registry.register(service_class)
    return registry


_REGISTRY = _built_in_registry()


def default_service_registry() -> ServiceRegistry:
    """The registry with the built-in types and every entry-point type loaded (once)."""
    _REGISTRY.load_entry_points(ENTRY_POINT_GROUP)
    return _REGISTRY
