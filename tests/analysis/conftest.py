"""Fixtures for the analysis tests: a warehouse path (the run builders are in runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "warehouse" / "results.duckdb"
