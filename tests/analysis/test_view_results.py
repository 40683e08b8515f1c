"""Every view and raw table gives the results frozen before issue 22 (raw rows moved out of
DuckDB into the run directories' Parquet files) on the same fixture runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.analysis.view_results import FROZEN, build


def differences(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """One line per view whose results differ from the frozen ones."""
    found = []
    for name, expected in sorted(frozen.items()):
        actual = now.get(name)
        if actual is None:
            found.append(f"{name}: missing")
        elif actual["columns"] != expected["columns"]:
            found.append(f"{name}: columns {actual['columns']} != {expected['columns']}")
        elif actual["sha256"] != expected["sha256"]:
            first = next(
                (
                    f"{row} != {old}"
                    for row, old in zip(
                        actual.get("data", []), expected.get("data", []), strict=False
                    )
                    if row != old
                ),
                "",
            )
            found.append(f"{name}: {actual['rows']} rows (frozen {expected['rows']}) {first}")
    return found


def test_every_view_and_raw_table_equals_the_frozen_results(tmp_path: Path) -> None:
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    now = build(tmp_path)
    assert differences(frozen, now) == []
    assert "query_latency" in frozen and "stage_events" in frozen  # the freeze covered them
