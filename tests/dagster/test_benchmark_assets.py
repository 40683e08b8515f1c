"""benchmark_run, warehouse and the report assets materialised in process for a tiny spec:
the Pipes child really runs `collobench run` in its own process group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.assets.benchmark import benchmark_run
from bench_defs.assets.reports import report_assets
from bench_defs.assets.warehouse import warehouse
from bench_defs.core.specs import SPEC_PARTITIONS
from stages.validation.loading import load_spec
from tests.dagster.specs import tiny_spec, write_spec

pytestmark = pytest.mark.spawns  # every test here starts a process

ASSETS = [benchmark_run, warehouse, *report_assets]
OVERRIDE = {"ops": {"benchmark_run": {"config": {"rate": 80}}}}


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    for event in result.get_asset_materialization_events():
        if event.materialization.asset_key == dg.AssetKey(asset):
            return {key: value.value for key, value in event.materialization.metadata.items()}
    raise AssertionError(f"no materialisation of {asset}")


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {
        evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()
    }


@pytest.mark.slow
def test_benchmark_warehouse_and_reports(
    instance: dg.DagsterInstance, resources: dict[str, Any], specs_dir: Path
) -> None:
    spec = write_spec(specs_dir, "tiny", tiny_spec())
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["tiny"])
    first = dg.materialize(
        ASSETS, partition_key="tiny", instance=instance, resources=resources, run_config=OVERRIDE
    )
    assert first.success
    run = _metadata(first, "benchmark_run")
    run_dir = Path(str(run["run_dir"]))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # the Launchpad override reached the run, its manifest and the metadata
    assert manifest["overrides"] == ["pipelines.0.loadgen.rate=80"]
    assert manifest["spec"]["pipelines"][0]["loadgen"]["rate"] == 80
    assert run["overrides"] == ["pipelines.0.loadgen.rate=80"]
    assert run["launchpad_overrides"] == {"rate": 80.0}
    assert run["spec_hash"] == load_spec(spec, ["pipelines.0.loadgen.rate=80"]).spec_hash
    assert run["run_id"] == manifest["run_id"] and run["run_id"].endswith(first.run_id[:8])
    assert run["status"] == "ok" and run["energy_source"] == "none"
    assert 40 < run["p/queries_per_s"] < 120 and 0 < run["p/p50_ms"] <= run["p/p99_ms"]
    assert "| 0 | solo | p | ok |" in run["summary"]

    loaded = _metadata(first, "warehouse")
    assert loaded["run_id"] == run["run_id"] and loaded["previous_run_id"] == "none"
    checks = _checks(first)
    assert set(checks) == {"validity", "slo", "regression", "reproducibility"}
    assert checks["validity"].passed, checks["validity"].description
    assert "undecided: 1 run(s) in the history" in str(checks["regression"].description)

    latency = _metadata(first, "latency")
    assert "p99 ms" in latency["table"] and "| 0 | solo | p |" in latency["table"]
    assert latency["plot_latency_cdf"].startswith("![latency_cdf](data:image/png;base64,iVBOR")
    assert Path(str(latency["plot_latency_cdf_path"])).is_file()
    assert "q/s" in _metadata(first, "throughput")["table"]
    assert "No contention" in _metadata(first, "contention")["table"]
    history = _metadata(first, "history")
    assert history["runs"] == 1 and history["change_points"] == 0
    assert "| undecided |" in history["latest_run"]
    assert history["plot_history"].startswith("![history](data:image/png;base64,iVBOR")
    assert Path(str(history["plot_history_path"])) == run_dir / "history.png"

    # the same partition again (same overrides): compared with the first run
    second = dg.materialize(
        ASSETS[:2],
        partition_key="tiny",
        instance=instance,
        resources=resources,
        run_config=OVERRIDE,
    )
    assert second.success
    rerun = _checks(second)
    assert rerun["reproducibility"].metadata["schedule_compared_with"].value == run["run_id"]
    assert "2 run(s) in the history" in str(rerun["regression"].description)
    problems = str(rerun["reproducibility"].metadata["problems"].value)
    assert "scheduled arrivals differ" not in problems  # same spec hash and seeds: same schedule


def test_an_invalid_spec_fails_the_step_with_its_reason(
    instance: dg.DagsterInstance, resources: dict[str, Any], specs_dir: Path
) -> None:
    broken = tiny_spec()
    broken["pipelines"][0]["loadgen"]["rtae"] = 5
    write_spec(specs_dir, "broken", broken)
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["broken"])
    result = dg.materialize(
        [benchmark_run],
        partition_key="broken",
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "rtae" in str(failure.step_failure_data.error)
