"""The README's stage example runs as written, and its CLI table names real commands."""

from __future__ import annotations

import re

import pytest

from stages.cli.app import app
from stages.runtime.driver import run_pipeline
from stages.runtime.registry import default_registry
from stages.spec.models import PipelineSpec
from tests.helpers import REPO, rows

README = (REPO / "README.md").read_text()


def test_stage_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The example registers `example.upper` in the process-wide registry: let it register into
    # a copy of the registry's table, which monkeypatch swaps back after the test.
    registry = default_registry()
    monkeypatch.setattr(registry, "_types", dict(registry._types))
    block = README.split("<!-- the test suite runs this example -->", 1)[1]
    code = re.search(r"```python\n(.*?)```", block, re.S)
    assert code is not None
    assert len(code.group(1).strip().splitlines()) <= 25
    exec(compile(code.group(1), "README.md", "exec"), {"__name__": "readme_example"})
    assert "example.upper" in default_registry().names()
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {"type": "closed_loop", "max_queries": 3, "min_queries": 3, "duration_s": 9},
            "stages": [{"id": "up", "type": "example.upper", "config": {"repeat": 2}}],
        }
    )
    result, recorder = run_pipeline(spec)
    assert result.status == "ok" and len(rows(recorder, "queries")) == 3


def test_cli_table_lists_real_commands() -> None:
    documented = set(re.findall(r"\| `collobench (\w+)", README))
    registered = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    registered |= {group.name for group in app.registered_groups if group.name}
    assert documented and documented <= registered


def test_exit_codes_match_the_exit_code_enum() -> None:
    from stages.contracts.errors import ExitCode

    documented = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", README, re.M))
    assert documented == {str(code.value): code.meaning for code in ExitCode}
