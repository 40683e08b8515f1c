"""Spec loading and `collobench validate/schema`: exact one-line errors, exit codes, hashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from stages.cli.app import app
from stages.validation.loading import SpecError, load_spec
from tests.helpers import REPO

runner = CliRunner()

VALID = """
name: demo
pipelines:
  - name: classify
    loadgen: {type: server, rate: 50, duration_s: 1}
    stages:
      - {id: data, type: noop, outputs: [model]}
      - {id: model, type: sleep, config: {ms: 1}}
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def validate(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["validate", *args])
    return result.exit_code, result.output


def test_shipped_specs_are_valid() -> None:
    specs = sorted(str(path) for path in (REPO / "specs").glob("*.yaml"))
    assert len(specs) >= 3
    code, output = validate(*specs)
    assert code == 0, output
    assert "noop_collocated.yaml: ok" in output


BAD_INPUTS = [
    ("invalid yaml", "name: [unclosed\n", "line 2, column 1: invalid YAML"),
    ("not a mapping", "- 1\n- 2\n", ": a spec is a YAML mapping, got list"),
    (
        "wrong type",
        VALID.replace("rate: 50", "rate: fast"),
        "pipelines[0].loadgen.rate: Input should be a valid number",
    ),
    (
        "unknown key",
        VALID.replace("rate: 50", "rat: 50, rate: 50"),
        "pipelines[0].loadgen.rat: unknown key 'rat' (did you mean 'rate'?)",
    ),
    (
        "unknown stage type",
        VALID.replace("type: noop", "type: nop"),
        "pipelines[0].stages[0].type: unknown stage type 'nop' (did you mean 'noop'?); registered:",
    ),
    (
        "duplicate stage id",
        VALID.replace("id: model", "id: data").replace("[model]", "[data]"),
        "pipelines[0].stages[1].id: duplicate stage id 'data' (also stages[0])",
    ),
    (
        "edge to nowhere",
        VALID.replace("outputs: [model]", "outputs: [modle]"),
        "pipelines[0].stages[0].outputs[0]: no stage with id 'modle' (did you mean 'model'?)",
    ),
    (
        "empty pipelines",
        "name: demo\npipelines: []\n",
        "pipelines: List should have at least 1 item after validation, not 0",
    ),
    (
        "negative rate",
        VALID.replace("rate: 50", "rate: -5"),
        "pipelines[0].loadgen.rate: Input should be greater than 0",
    ),
    (
        "bad stage config",
        VALID.replace("ms: 1", "ms: -1"),
        "pipelines[0].stages[1].config.ms: Input should be greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(("label", "text", "expected"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_gives_one_line_and_exit_2(
    tmp_path: Path, label: str, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    code, output = validate(str(path))
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{path}: ")
    assert expected in lines[0]
    assert "Traceback" not in output


def test_missing_file(tmp_path: Path) -> None:
    code, output = validate(str(tmp_path / "nope.yaml"))
    assert code == 2
    assert output.strip() == f"{tmp_path / 'nope.yaml'}: file not found"


def test_cycle_needs_max_visits(tmp_path: Path) -> None:
    text = """
name: loop
pipelines:
  - name: p
    stages:
      - {id: a, type: noop, outputs: [b]}
      - {id: b, type: noop, outputs: [c]}
      - {id: c, type: route, config: {mode: loop, back_to: b, times: 2}, outputs: [b]}
"""
    code, output = validate(str(write(tmp_path, text)))
    assert code == 2
    assert "pipelines[0].stages[1]: cycle through b, c has no stage with `max_visits`" in output
    fixed = text.replace("outputs: [b]}\n", "outputs: [b], max_visits: 2}\n", 1)
    fixed = fixed.replace(
        "{id: b, type: noop, outputs: [c]}", "{id: b, type: noop, outputs: [c], max_visits: 2}"
    )
    assert validate(str(write(tmp_path, fixed, "fixed.yaml")))[0] == 0


def test_several_problems_one_line_each(tmp_path: Path) -> None:
    text = VALID.replace("outputs: [model]", "outputs: [modle]").replace(
        "type: sleep", "type: slep"
    )
    code, output = validate(str(write(tmp_path, text)))
    assert code == 2
    assert len(output.strip().splitlines()) == 2


def test_yaml_tags_are_not_constructed(tmp_path: Path) -> None:
    text = VALID.replace("name: demo", "name: !!python/object/apply:os.system ['true']")
    code, output = validate(str(write(tmp_path, text)))
    assert code == 2
    assert "invalid YAML" in output


def test_overrides_apply_and_change_the_hash(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    base = load_spec(path)
    by_index = load_spec(path, ["pipelines.0.loadgen.rate=75"])
    by_name = load_spec(path, ["pipelines.classify.stages.model.config.ms=2.5"])
    assert by_index.spec.pipelines[0].loadgen.rate == 75
    assert by_name.spec.pipelines[0].stages[1].config == {"ms": 2.5}
    assert len({base.spec_hash, by_index.spec_hash, by_name.spec_hash}) == 3
    with pytest.raises(SpecError, match=r"--set pipelines.9: no list item '9'"):
        load_spec(path, ["pipelines.9.loadgen.rate=1"])
    with pytest.raises(SpecError, match="Input should be greater than 0"):
        load_spec(path, ["pipelines.0.loadgen.rate=-1"])


def test_hash_ignores_spelling_of_defaults(tmp_path: Path) -> None:
    explicit = VALID.replace("{id: data, type: noop,", "{id: data, type: noop, config: {},")
    explicit = explicit.replace("name: demo", "name: demo\nseed: 0\nrepeats: 1")
    explicit = explicit.replace("type: server", "type: poisson")
    assert (
        load_spec(write(tmp_path, VALID)).spec_hash
        == load_spec(write(tmp_path, explicit, "explicit.yaml")).spec_hash
    )


def test_schema_is_valid_json_schema_and_accepts_shipped_specs() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in (REPO / "specs").glob("*.yaml"):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path, errors[0].message)
    bad = yaml.safe_load(VALID.replace("ms: 1", "ms: -1"))
    assert list(validator.iter_errors(bad)), "stage config must be checked by the schema"
    assert "noop" in schema["$defs"]["StageSpec"]["properties"]["type"]["enum"]


@pytest.mark.spawns
def test_console_script_exit_code_and_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("rate: 50", "rate: -5"))
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert completed.returncode == 2
    assert (
        completed.stderr.strip()
        == f"{path}: pipelines[0].loadgen.rate: Input should be greater than 0"
    )
    assert "Traceback" not in completed.stderr


def test_sql_without_a_database_says_how_to_get_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sql", "SELECT 1", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2
    assert "collobench load" in result.output


def test_offline_needs_its_sample_count(tmp_path: Path) -> None:
    text = VALID.replace("{type: server, rate: 50, duration_s: 1}", "{type: offline}")
    code, output = validate(str(write(tmp_path, text)))
    assert code == 2
    assert "pipelines[0].loadgen: offline issues `samples_per_query` samples at once" in output
    fixed = VALID.replace(
        "{type: server, rate: 50, duration_s: 1}", "{type: offline, samples_per_query: 500}"
    )
    assert validate(str(write(tmp_path, fixed, "fixed.yaml")))[0] == 0


def test_join_inside_a_loop_is_refused(tmp_path: Path) -> None:
    text = """
name: bad-join
pipelines:
  - name: p
    stages:
      - {id: a, type: route, outputs: [b, c]}
      - {id: b, type: noop, outputs: [j]}
      - {id: c, type: noop, outputs: [j]}
      - {id: j, type: noop, input_policy: join, outputs: [r], max_visits: 3}
      - {id: r, type: route, config: {mode: loop, back_to: j, times: 2}, outputs: [j, z]}
      - {id: z, type: noop}
"""
    code, output = validate(str(write(tmp_path, text)))
    assert code == 2
    assert "pipelines[0].stages[3].input_policy: join stage 'j' is on a loop" in output


def test_timeout_must_cover_warmup_and_duration(tmp_path: Path) -> None:
    short = VALID.replace(
        "{type: server, rate: 50, duration_s: 1}",
        "{type: server, rate: 50, duration_s: 1, warmup_s: 0.5, warmup_queries: 50, "
        "timeout_s: 2.5}",
    )
    code, output = validate(str(write(tmp_path, short)))
    assert code == 2
    assert (
        "pipelines[0].loadgen: timeout_s 2.5 cannot cover warm-up plus duration: it must exceed "
        "duration_s 1 + warmup_s 0.5 + warmup_queries 50 / rate 50 = 2.5 s"
    ) in output
    longer = short.replace("timeout_s: 2.5", "timeout_s: 2.6")
    assert validate(str(write(tmp_path, longer, "longer.yaml")))[0] == 0
    closed = VALID.replace(
        "{type: server, rate: 50, duration_s: 1}",
        "{type: closed_loop, duration_s: 30, warmup_queries: 50, timeout_s: 20}",
    )
    code, output = validate(str(write(tmp_path, closed, "closed.yaml")))
    assert code == 2
    assert (
        "timeout_s 20 cannot cover warm-up plus duration: it must exceed duration_s 30 + "
        "warmup_s 0 = 30 s" in output
    )


TWO_PIPELINES = """
name: pinned
pipelines:
  - name: a
    placement: {cpus: [0], scheduling_policy: batch}
    stages: [{id: s, type: noop}]
  - name: b
    placement: {cpus: [1]}
    stages: [{id: s, type: noop}]
"""


def test_a_scheduling_policy_needs_cores_no_one_else_runs_on(tmp_path: Path) -> None:
    """`batch` on cores of its own validates; without cpus, beside a pipeline that may run
    anywhere, or on a core another pipeline shares, it is refused with the path and reason."""
    assert validate(str(write(tmp_path, TWO_PIPELINES)))[0] == 0
    at = "pipelines[0].placement.scheduling_policy: 'batch' needs"
    for label, text, reason in [
        ("no cpus", TWO_PIPELINES.replace("cpus: [0], ", ""), f"{at} placement.cpus"),
        ("neighbour anywhere", TWO_PIPELINES.replace("placement: {cpus: [1]}", "placement: {}"),
         f"{at} cores of its own, but pipeline 'b' has no placement.cpus"),
        ("shared core", TWO_PIPELINES.replace("cpus: [1]", "cpus: [1, 0]"),
         f"{at} cores of its own, but pipeline 'b' also runs on cpus [0]"),
    ]:  # fmt: skip
        code, output = validate(str(write(tmp_path, text, f"{label}.yaml")))
        assert code == 2 and reason in output, (label, output)


def test_the_default_scheduling_policy_leaves_the_spec_hash_unchanged(tmp_path: Path) -> None:
    """Spelling out `scheduling_policy: other` changes nothing; `batch` is part of the hash
    (and so of the manifest's spec)."""
    base = load_spec(write(tmp_path, TWO_PIPELINES.replace(", scheduling_policy: batch", "")))
    spelled = load_spec(write(tmp_path, TWO_PIPELINES.replace("batch", "other"), "other.yaml"))
    batch = load_spec(write(tmp_path, TWO_PIPELINES, "batch.yaml"))
    assert base.spec_hash == spelled.spec_hash != batch.spec_hash
    assert "scheduling_policy" not in base.normalized["pipelines"][0]["placement"]
    assert batch.normalized["pipelines"][0]["placement"]["scheduling_policy"] == "batch"
