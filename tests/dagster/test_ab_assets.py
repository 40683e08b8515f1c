"""The `ab_report` asset and `ab_comparison` job: the Launchpad config becomes the `collobench
ab` command line, and (slow) the real CLI runs an A/A session of the shipped A/B demo spec in a
Pipes child, its verdicts reported as metadata with the session folder and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.ab.assets import AB_JOB, AbConfig, ab_command, ab_report, figure_line
from bench_defs.ab.runner import session_answer
from bench_defs.core.resources import CollobenchResource
from tests.helpers import REPO

VERDICTS = {"regressed", "improved", "equivalent", "undecided"}


def test_the_config_becomes_the_cli_command(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\n")
    (tmp_path / "b.yaml").write_text("name: b\n")
    collobench = CollobenchResource(specs_dir=str(tmp_path), python="/py")
    config = AbConfig(
        spec="a", spec_b="b.yaml", looks="4,8", overrides=["x=1"], metric="latency_p50_ms"
    )
    command = ab_command(config, collobench)
    assert command[:4] == ["/py", "-m", "bench_defs.ab.runner", "--"]
    assert command[4:10] == ["/py", "-m", "stages.cli", "ab", str(tmp_path / "a.yaml"),
                             str(tmp_path / "b.yaml")]  # fmt: skip
    assert command[10:] == [
        "--margin-pct", "5", "--budget-min", "15", "--looks", "4,8",
        "--metric", "latency_p50_ms", "--set", "x=1", "--format", "json",
    ]  # fmt: skip
    aa = ab_command(AbConfig(spec="a", aa=True, mlflow=False, seed=7), collobench)
    assert {"--aa", "--no-mlflow"} <= set(aa) and aa[aa.index("--seed") + 1] == "7"
    with pytest.raises(dg.Failure, match="no spec 'missing'"):
        ab_command(AbConfig(spec="missing"), collobench)


def test_a_figure_reads_as_one_line() -> None:
    row = {"verdict": "regressed", "change_pct": -8.04, "change_ci95": [-12.0, None],
           "mde_pct": None, "blocks": 12}  # fmt: skip
    assert figure_line(row) == "regressed -8.0% [-12.0, ?], mde inf, 12 blocks"


def test_the_runner_hands_back_the_rows_and_the_session_folder(home: Path) -> None:
    answer = session_answer('[{"session_id": "s1", "verdict": "equivalent"}]')
    assert answer == {"rows": [{"session_id": "s1", "verdict": "equivalent"}],
                      "session_dir": str(home / "ab" / "s1")}  # fmt: skip
    assert session_answer("[]") == {"rows": [], "session_dir": None}
    for not_rows in ("plan: 4 blocks", '{"a": 1}', "[1]"):
        with pytest.raises(ValueError, match=r"Expecting value|no array of objects"):
            session_answer(not_rows)


def test_the_job_is_registered(defs: dg.Definitions) -> None:
    job = defs.resolve_job_def(AB_JOB)
    assert job.asset_layer.executable_asset_keys == {ab_report.key}


@pytest.mark.spawns
@pytest.mark.slow
def test_an_aa_session_of_the_demo_spec_reports_its_verdicts(
    instance: dg.DagsterInstance, resources: dict[str, Any], home: Path
) -> None:
    """End to end through the job (about a minute): four blocks of 1-s segments."""
    config = {
        "spec": str(REPO / "specs" / "ab_demo.yaml"),
        "aa": True,
        "overrides": ["pipelines.0.loadgen.duration_s=1"],
        "looks": "4",
        "mlflow": False,
    }
    job = build_job(resources)
    result = job.execute_in_process(
        run_config={"ops": {"ab_report": {"config": config}}}, instance=instance
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    metadata: dict[str, Any] = {
        key: value.value for key, value in event.materialization.metadata.items()
    }
    session_dir = Path(str(metadata["session_dir"]))
    assert metadata["session_id"] == session_dir.name and session_dir.parent == home / "ab"
    session = json.loads((session_dir / "session.json").read_text())
    figures = [verdict["figure"] for verdict in session["verdicts"]]
    assert figures and session["aa"] is True
    for figure in figures:  # one line per figure, its verdict first
        assert str(metadata[figure]).split()[0] in VERDICTS, metadata[figure]
    assert str(metadata["verdicts"]).count("\n") == 1 + len(figures)
    assert 1 <= metadata["blocks"] <= 4
    assert Path(str(metadata["plot_path"])).is_file()
    assert str(metadata["plot"]).startswith("![per-block changes](data:image/png;base64,")


def build_job(resources: dict[str, Any]) -> dg.JobDefinition:
    from bench_defs.definitions import build_definitions

    return build_definitions(resources).resolve_job_def(AB_JOB)
