"""The collocation modes, one module each, on one registry: the spec accepts exactly these
names, in the order of `MODE_CLASSES` (its schema and messages list them so). A new mode is a
module with a `CollocationMode` subclass, added to `MODE_CLASSES`."""

from stages.collocation_modes.base import CollocationMode, CollocationModeRegistry
from stages.collocation_modes.cpu_pinned import CpuPinned
from stages.collocation_modes.mig import Mig
from stages.collocation_modes.mps import Mps
from stages.collocation_modes.time_slice import TimeSlice

MODE_CLASSES: tuple[type[CollocationMode], ...] = (TimeSlice, Mps, Mig, CpuPinned)
"""Every mode, in the order the spec lists them (time_slice, the default, first)."""
COLLOCATION_MODE_NAMES = tuple(mode.name for mode in MODE_CLASSES)

COLLOCATION_MODES = CollocationModeRegistry()
for _mode in MODE_CLASSES:
    COLLOCATION_MODES.register(_mode)


def collocation_mode(name: str) -> CollocationMode:
    """The mode a spec's `collocation.mode` names (UnknownCollocationModeError if none)."""
    return COLLOCATION_MODES.get(name)


__all__ = ["COLLOCATION_MODES", "COLLOCATION_MODE_NAMES", "CollocationMode", "collocation_mode"]
