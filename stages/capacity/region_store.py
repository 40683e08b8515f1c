"""region.json on disk: written atomically (temporary file, fsync, rename) so a region killed
mid-write keeps its last complete state, and read back with the searches' capacity.json."""

from __future__ import annotations

import os
from pathlib import Path

from stages.contracts.capacity_files import CAPACITY_FILE, REGION_FILE, CapacityResult, RegionResult


def read_capacity(search_dir: Path) -> CapacityResult | None:
    """A search's capacity.json, None while it has not finished."""
    path = search_dir / CAPACITY_FILE
    if not path.is_file():
        return None
    return CapacityResult.model_validate_json(path.read_text())


def read_region(region_dir: Path) -> RegionResult | None:
    path = region_dir / REGION_FILE
    if not path.is_file():
        return None
    return RegionResult.model_validate_json(path.read_text())


def write_region(region_dir: Path, region: RegionResult) -> Path:
    """region.json written to a temporary file, fsynced, then renamed over the old one."""
    region_dir.mkdir(parents=True, exist_ok=True)
    path = region_dir / REGION_FILE
    temporary = path.with_suffix(".json.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(region.model_dump_json(indent=2))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path
