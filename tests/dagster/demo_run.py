"""What the session's `demo_run` fixture (tests/dagster/conftest.py) hands its tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DemoRun:
    """`python -m bench_defs.demo --partition tiny` as `make demo` runs it, done once per
    session (the tests that only read its instance and files share it)."""

    home: Path
    specs_dir: Path
    dagster_home: Path
    completed: subprocess.CompletedProcess[str]

    def env(self) -> dict[str, str]:
        """What a process reading this demo needs (dagster dev, the UI)."""
        return {
            "COLLOBENCH_HOME": str(self.home),
            "COLLOBENCH_SPECS_DIR": str(self.specs_dir),
            "COLLOBENCH_MLFLOW": "0",
        }
