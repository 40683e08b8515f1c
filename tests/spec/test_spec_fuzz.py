"""Property test: whatever a mutated spec contains, `validate` exits 0 or 2, never crashes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from stages.cli.app import app
from tests.strategies import mutated_specs

runner = CliRunner()


# 100 independent mutated specs find a fault that 3% of them hit with probability 0.95
# (1 - 0.97 ** 100); 300 cost 16 s for a fault of 1%. The hostile-input suite draws 300 more from
# the same mutations with hostile values (tests/reliability/test_hostile_inputs.py::
# test_mutated_specs), and `make soak` 3,000.
@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_validate_never_raises(document: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
        result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert lines and all(line.startswith(f"{path}: ") for line in lines), result.output
