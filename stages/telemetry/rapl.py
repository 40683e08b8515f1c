"""Host CPU energy from the RAPL package counters under /sys/class/powercap, read with one
pread per sample; many distributions make them root-only since 2020 (then: not available)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

POWERCAP_ROOT = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")  # intel-rapl:0, not subzones intel-rapl:0:0


@dataclass
class _RaplZone:
    """One RAPL package counter, kept open: a pread per sample is the cheapest read."""

    path: Path
    fd: int
    max_range_uj: int
    last_uj: int

    def read_uj(self) -> int:
        return int(os.pread(self.fd, 32, 0))


class RaplReader:
    """Sums package-level RAPL energy counters, handling wrap-around; `available` is False
    when none is readable (absent, or root-only as on most distributions since 2020)."""

    def __init__(self, powercap_root: Path = POWERCAP_ROOT) -> None:
        self.zones: list[_RaplZone] = []
        self.total_j = 0.0
        if not powercap_root.is_dir():
            return
        for directory in sorted(powercap_root.iterdir()):
            if not _PACKAGE_ZONE.match(directory.name):
                continue
            name = _read_text(directory / "name")
            if name is not None and not name.startswith("package"):
                continue  # e.g. `psys` covers the whole platform and would double count
            zone = _open_zone(directory)
            if zone is not None:
                self.zones.append(zone)

    @property
    def available(self) -> bool:
        return bool(self.zones)

    def read_j(self) -> float:
        """Joules since this reader was created (all packages)."""
        for zone in self.zones:
            value = zone.read_uj()
            delta = value - zone.last_uj
            if delta < 0:  # wrapped at max_energy_range_uj (or, with no range, restarted)
                delta = delta + zone.max_range_uj if zone.max_range_uj > 0 else value
            zone.last_uj = value
            self.total_j += max(delta, 0) / 1e6
        return self.total_j

    def close(self) -> None:
        for zone in self.zones:
            os.close(zone.fd)
        self.zones = []


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _open_zone(directory: Path) -> _RaplZone | None:
    try:
        fd = os.open(directory / "energy_uj", os.O_RDONLY)
    except OSError:  # absent, or root-only since CVE-2020-8694
        return None
    try:
        max_range_uj = int(_read_text(directory / "max_energy_range_uj") or 0)
        zone = _RaplZone(directory, fd, max_range_uj, 0)
        zone.last_uj = zone.read_uj()
    except (OSError, ValueError) as error:
        log.info("RAPL zone %s unreadable: %s", directory, error)
        os.close(fd)
        return None
    return zone
