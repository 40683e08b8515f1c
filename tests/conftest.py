"""Shared fixtures; test-only stage types live in `tests.helpers` (imported here to register)."""

from __future__ import annotations

import os

import pytest

import tests.helpers  # noqa: F401 - registers the test stage types


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test writes under its own COLLOBENCH_HOME, never the developer's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("COLLOBENCH_HOME", str(home))
    monkeypatch.setenv("COLLOBENCH_MLFLOW", os.environ.get("COLLOBENCH_TEST_MLFLOW", "0"))
