"""The README's stage example runs as written, its CLI table names real commands, its exit codes
are the ExitCode enum's, and specs are as strict (and as lenient) as it says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from stages.cli.app import app
from stages.contracts.errors import ExitCode
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


_STRICT_SPEC = """
name: strict
pipelines:
  - name: p
    loadgen: {type: closed_loop, max_queries: 3}
    stages:
      - {id: data, type: sleep, config: {ms: 1}, outputs: [model]}
      - {id: model, type: busy, config: {ms: 1}}
"""


@pytest.mark.parametrize(
    ("problem", "edit", "says"),
    [
        ("an unknown key", lambda d: d["pipelines"][0].update(colour="red"), "colour"),
        (
            "a wrong type",
            lambda d: d["pipelines"][0]["loadgen"].update(max_queries="x"),
            "max_queries",
        ),
        (
            "an unknown stage type",
            lambda d: d["pipelines"][0]["stages"][1].update(type="bsy"),
            "'bsy'",
        ),
        (
            "an edge to a stage that does not exist",
            lambda d: d["pipelines"][0]["stages"][0].update(outputs=["modle"]),
            "no stage with id 'modle' (did you mean 'model'?)",
        ),
        (
            "a loop without `max_visits`",
            lambda d: d["pipelines"][0]["stages"][1].update(outputs=["data"]),
            "max_visits",
        ),
    ],
)
def test_specs_are_as_strict_as_the_readme_says(
    tmp_path: pytest.TempPathFactory, problem: str, edit: Any, says: str
) -> None:
    """Each problem the README lists gives `path: reason` lines and exit code 2."""
    assert problem in " ".join(README.split("Specs are strict:", 1)[1].split("\n\n")[0].split())
    document = yaml.safe_load(_STRICT_SPEC)
    edit(document)
    path = Path(str(tmp_path)) / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    lines = result.output.strip().splitlines()
    assert lines and all(line.startswith(f"{path}: pipelines[0]") for line in lines), lines
    assert says in result.output


def test_the_loadgen_leniency_the_readme_names_holds(tmp_path: pytest.TempPathFactory) -> None:
    """A closed-loop pipeline takes `rate` (a server field) and ignores it, as the README says."""
    assert "a `loadgen` block accepts the fields of every load generator type" in " ".join(
        README.split()
    )
    document = yaml.safe_load(_STRICT_SPEC)
    document["pipelines"][0]["loadgen"]["rate"] = 50
    path = Path(str(tmp_path)) / "lenient.yaml"
    path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == ExitCode.OK, result.output
