"""Per-test Dagster fixtures: a temporary specs folder, the test's COLLOBENCH_HOME, the
resources and definitions pointed at both, and a temporary Dagster instance. A plain module,
so tests/dagster/conftest.py and the reliability tests both import them from here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.core.resources import CollobenchResource, GroupPipesClient, WarehouseResource
from bench_defs.definitions import build_definitions


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The COLLOBENCH_HOME the conftest's autouse fixture set for this test."""
    return Path(os.environ["COLLOBENCH_HOME"])


@pytest.fixture
def resources(home: Path, specs_dir: Path) -> dict[str, Any]:
    return {
        "collobench": CollobenchResource(home=str(home), specs_dir=str(specs_dir)),
        "duckdb_warehouse": WarehouseResource(path=str(home / "results.duckdb")),
        "pipes_client": GroupPipesClient(termination_grace_s=10),
    }


@pytest.fixture
def defs(resources: dict[str, Any]) -> dg.Definitions:
    return build_definitions(resources)


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    folder = tmp_path / "dagster"
    folder.mkdir()
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        yield instance
