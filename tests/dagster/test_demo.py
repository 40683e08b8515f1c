"""`make demo` through Dagster (bench_defs/demo.py): run as `make demo` runs it (the session's
`demo_run`, a tiny spec that uses one artefact), then read back through the instance the UI
reads that the artefact, benchmark_run, warehouse and a report asset are materialised."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from bench_defs.core.pools import POOL_TAG
from bench_defs.core.specs import SPEC_PARTITIONS
from bench_defs.demo import UI_HINT, main, prepare_dagster_home
from tests.dagster.demo_run import DemoRun
from tests.dagster.specs import tiny_spec, write_spec


@pytest.mark.spawns
@pytest.mark.slow
def test_demo_materialises_through_dagster(demo_run: DemoRun) -> None:
    lines = demo_run.completed.stdout.splitlines()
    assert lines[-1] == UI_HINT
    printed = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines if ": " in line}
    run_dir = Path(printed["run directory"])
    assert run_dir.parent == demo_run.home / "runs" and run_dir.name.startswith("20")
    assert Path(printed["report"]) == run_dir / "report.md" and (run_dir / "report.md").is_file()
    assert Path(printed["plot"]).parent == run_dir  # the last plot line
    assert printed["trace"].startswith(str(run_dir / "trace.json"))
    assert "validity" in printed["checks"] and "reproducibility" in printed["checks"]

    # the instance `make ui` reads: DAGSTER_HOME defaulted to $COLLOBENCH_HOME/dagster
    config = yaml.safe_load((demo_run.dagster_home / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    assert config["concurrency"]["runs"]["tag_concurrency_limits"][0]["limit"] == 1
    with dg.DagsterInstance.from_config(str(demo_run.dagster_home)) as instance:
        assert instance.get_dynamic_partitions(SPEC_PARTITIONS) == ["tiny"]
        prompts = instance.get_latest_materialization_event(dg.AssetKey("prompts"))
        assert prompts is not None and prompts.asset_materialization is not None
        assert "content_hash" in prompts.asset_materialization.metadata
        for name in ("benchmark_run", "warehouse", "latency"):
            event = instance.get_latest_materialization_event(dg.AssetKey(name))
            assert event is not None and event.asset_materialization is not None, name
            assert event.asset_materialization.partition == "tiny", name
        run = instance.get_latest_materialization_event(dg.AssetKey("benchmark_run"))
        assert run is not None and run.asset_materialization is not None
        assert run.asset_materialization.metadata["run_dir"].value == str(run_dir)
        runs = instance.get_runs()
        assert sorted(r.job_name for r in runs) == ["artifacts_job", "benchmark_job"]
        assert all(r.is_success for r in runs)
        benchmark = next(r for r in runs if r.job_name == "benchmark_job")
        assert benchmark.tags[POOL_TAG] == "local"
        assert benchmark.tags["dagster/partition"] == "tiny"
        # only what the spec uses (and its upstream) was built: not the digits CNN
        assert instance.get_latest_materialization_event(dg.AssetKey("digits_cnn")) is None


def test_prepare_dagster_home_keeps_a_users_config(tmp_path: Path) -> None:
    fresh = prepare_dagster_home(tmp_path / "fresh")
    assert "tag_concurrency_limits" in fresh.read_text()
    own = tmp_path / "own"
    own.mkdir()
    (own / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # the user's settings stay; only the pool limits are written into it
    assert yaml.safe_load(prepare_dagster_home(own).read_text()) == {
        "telemetry": {"enabled": False},
        "concurrency": {
            "runs": {"tag_concurrency_limits": [{"key": POOL_TAG, "value": "local", "limit": 1}]}
        },
    }
    empty = tmp_path / "empty"  # what the old `make demo` left (touch)
    empty.mkdir()
    (empty / "dagster.yaml").write_text("")
    assert "concurrency" in prepare_dagster_home(empty).read_text()


def test_an_invalid_or_missing_spec_exits_2_with_its_reason(
    tmp_path: Path,
    specs_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    broken = tiny_spec()
    broken["pipelines"][0]["loadgen"]["rtae"] = 5
    write_spec(specs_dir, "broken", broken)
    assert main(["--partition", "broken", "--specs-dir", str(specs_dir)]) == 2
    assert "rtae" in capsys.readouterr().err
    assert main(["--partition", "absent", "--specs-dir", str(specs_dir)]) == 2
    assert "absent.yaml: no such spec file" in capsys.readouterr().err
