"""`dagster definitions validate -w workspace.yaml` (the path `make ui` uses) accepts the code
location; no torch in it is checked by tests/test_layering.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.spawns  # every test here starts a process


def test_workspace_validates(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "All code locations passed validation" in completed.stderr + completed.stdout
