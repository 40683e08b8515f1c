"""Figures the reliability suite counts while it runs (faults survived, inputs rejected, events
lost, processes left, growth over the soak); `perf/soak.py` prints them as one JSON line."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

FIGURES_ENV = "COLLOBENCH_RELIABILITY_FIGURES"
"""When set, the path of the JSON file the session's figures are merged into at its end."""

_counts: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
_values: dict[str, dict[str, Any]] = defaultdict(dict)


def count(category: str, key: str, amount: int = 1) -> None:
    """Add `amount` to a counter, such as `count("faults_survived", "worker_sigkill")`."""
    _counts[category][key] += amount


def record(category: str, key: str, value: Any) -> None:
    """Keep one measured value (JSON-serialisable), such as an RSS growth in MiB."""
    _values[category][key] = value


def snapshot() -> dict[str, Any]:
    """Everything counted and recorded so far in this process."""
    merged: dict[str, Any] = {name: dict(keys) for name, keys in _counts.items()}
    for name, keys in _values.items():
        merged.setdefault(name, {}).update(keys)
    return merged


def write_if_requested() -> None:
    """Merge this session's figures into the file named by `COLLOBENCH_RELIABILITY_FIGURES`."""
    target = os.environ.get(FIGURES_ENV)
    if not target:
        return
    path = Path(target)
    existing: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for name, keys in snapshot().items():
        section = existing.setdefault(name, {})
        for key, value in keys.items():
            if name in _counts and key in _counts[name] and isinstance(section.get(key), int):
                section[key] += value
            else:
                section[key] = value
    path.write_text(json.dumps(existing, indent=1, sort_keys=True))
