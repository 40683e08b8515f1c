"""`collobench capacity` refuses bad input with one line and exit 2 before running anything;
an infeasible SLO is an answer (exit 0); Ctrl-C exits 130 naming `--resume`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from stages.capacity import search_runner
from stages.cli.app import app
from stages.contracts.capacity_files import CapacityResult, ProbeRecord

runner = CliRunner()
START = ["capacity"]
FLAGS = ["--pipeline", "sleeper", "--no-mlflow"]


def write_spec(folder: Path, target: dict[str, Any] | None = None) -> Path:
    loadgen = target or {"type": "server", "rate": 50, "slo_ms": 50, "duration_s": 15}
    document = {
        "name": "cap",
        "pipelines": [
            {"name": "sleeper", "loadgen": loadgen, "stages": [{"id": "s", "type": "sleep"}]},
            {
                "name": "busy",
                "loadgen": {"type": "server", "rate": 5},
                "stages": [{"id": "b", "type": "noop"}],
            },
            {"name": "looped", "stages": [{"id": "l", "type": "noop"}]},
        ],
    }
    path = folder / "cap.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def refused(tmp_path: Path, *args: str, spec: Path | None = None) -> str:
    """The one line `collobench capacity` printed, having exited 2."""
    spec = spec or write_spec(tmp_path)
    result = runner.invoke(
        app, ["capacity", str(spec), "--out", str(tmp_path / "out"), "--no-mlflow", *args]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written
    return lines[0]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_HOME", str(tmp_path / "home"))


def test_a_pipeline_without_an_slo_needs_slo_ms(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"type": "server", "rate": 50})
    line = refused(tmp_path, "--pipeline", "sleeper", spec=spec)
    assert line == "sleeper: no slo_ms in the spec's pipeline: give --slo-ms"


def test_an_unknown_pipeline_lists_the_known_ones(tmp_path: Path) -> None:
    line = refused(tmp_path, "--pipeline", "nope")
    assert line == "--pipeline nope: unknown pipeline (known: sleeper, busy, looped)"
    assert "known: sleeper, busy, looped" in refused(tmp_path)  # no --pipeline at all


@pytest.mark.parametrize("kind", ["closed_loop", "single_stream", "multi_stream", "offline"])
def test_a_target_without_an_offered_rate_is_an_open_loop_question(
    tmp_path: Path, kind: str
) -> None:
    loadgen: dict[str, Any] = {"type": kind, "slo_ms": 50}
    if kind in ("multi_stream", "offline"):
        loadgen["samples_per_query"] = 8
    line = refused(tmp_path, "--pipeline", "sleeper", spec=write_spec(tmp_path, loadgen))
    assert line == (
        f"sleeper has a {kind} loadgen: capacity is an open-loop question: give sleeper a "
        "server or constant loadgen"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nope=3", "--with nope=3: unknown co-runner 'nope' (known: busy, looped)"),
        ("sleeper=3", "--with sleeper=3: unknown co-runner 'sleeper' (known: busy, looped)"),
        ("busy=fast", "--with busy=fast: RATE must be a positive number of queries/s"),
        ("busy=-2", "--with busy=-2: RATE must be a positive number of queries/s"),
        ("busy=inf", "--with busy=inf: RATE must be a positive number of queries/s"),
        ("busy", "--with 'busy': expected OTHER=RATE (e.g. busy=20)"),
    ],
)
def test_a_bad_co_runner_is_refused(tmp_path: Path, value: str, expected: str) -> None:
    assert refused(tmp_path, "--pipeline", "sleeper", "--with", value) == expected


def test_a_closed_loop_co_runner_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--pipeline", "sleeper", "--with", "looped=3")
    assert line.startswith("--with looped: a co-runner runs at a fixed rate")


def test_bad_search_settings_are_one_line(tmp_path: Path) -> None:
    line = refused(tmp_path, "--pipeline", "sleeper", "--percentile", "1.5")
    assert line.startswith("--percentile: ")
    assert refused(tmp_path, "--pipeline", "sleeper", "--probe-s", "0").startswith("--probe-s: ")


def test_resuming_a_search_that_does_not_exist_or_ran_on_another_spec(tmp_path: Path) -> None:
    assert refused(tmp_path, "--resume", "nope") == (
        f"--resume nope: no such search in {tmp_path / 'out'}"
    )
    from stages.capacity.store import SearchStore
    from stages.contracts.capacity_files import SearchSettings

    other = SearchSettings(
        search_id="old", pipeline="sleeper", slo_ms=50, probe_s=5, min_rate=1, spec_hash="abc"
    )
    SearchStore(tmp_path / "elsewhere" / "old").write_settings(other)
    spec = write_spec(tmp_path)
    result = runner.invoke(
        app, ["capacity", str(spec), "--out", str(tmp_path / "elsewhere"), "--resume", "old"]
    )
    assert result.exit_code == 2
    assert "the spec differs from the one the search started with" in result.output


def fake_result(stop_reason: str) -> CapacityResult:
    probe = ProbeRecord(
        index=0,
        rate=30.6,
        seed=0,
        queries=459,
        over_slo=459,
        verdict="missed",
        p99_ms=None,
        run_dir=None,
    )
    return CapacityResult(
        search_id="x",
        pipeline="sleeper",
        slo_ms=50,
        percentile=0.99,
        certified_qps=None,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(0.0, 30.6),
        probes=[probe],
        stop_reason=stop_reason,
        **{"with": {}},
    )


def invoke(tmp_path: Path, *extra: str) -> Any:
    spec = str(write_spec(tmp_path))
    return runner.invoke(app, [*START, spec, *FLAGS, "--out", str(tmp_path / "out"), *extra])


def test_an_infeasible_slo_is_an_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        search_runner, "run_capacity_search", lambda *args: fake_result("infeasible")
    )
    result = invoke(tmp_path, "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code == 0, result.output
    assert "stop reason: infeasible" in result.output
    assert "guaranteed (99%): -; estimate: -" in result.output
    assert "guaranteed = certified_qps: the SLO held at this rate" in result.output
    assert "estimate = estimate_qps: where the capacity most likely lies; not a guarantee" in (
        result.output
    )


def test_ctrl_c_exits_130_naming_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object) -> CapacityResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(search_runner, "run_capacity_search", interrupted)
    result = invoke(tmp_path, "--search-id", "mine")
    assert result.exit_code == 130
    assert "--resume mine" in result.output


def test_the_answer_names_the_report_and_its_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stages.cli.capacity_output import print_result

    report = tmp_path / "report.md"
    report.write_text("# report\n")
    print_result(fake_result("converged"), tmp_path, report)
    assert "plot: - (none was drawn)" in capsys.readouterr().out
    (tmp_path / "capacity_plot.png").write_bytes(b"png")
    print_result(fake_result("converged"), tmp_path, report)
    printed = capsys.readouterr().out
    assert f"report: {report}" in printed and f"plot: {tmp_path / 'capacity_plot.png'}" in printed
