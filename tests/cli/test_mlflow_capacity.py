"""log_search against a real MLflow sqlite store: a parent run per search with its settings,
answer, tags and artifacts, a nested child per probe, idempotent re-logging, a resumed
search replacing its earlier record, and a capacity II search (budget, time spent, stop detail,
windows, an unloaded and a cannot-pass probe)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from stages.cli.mlflow_capacity import log_search
from stages.contracts.capacity_files import CAPACITY_FILE
from stages.settings import default_tracking_uri
from tests.analysis.capacity_dirs import UNDECIDABLE_DETAIL, Search, classify_search, slow_search

pytestmark = pytest.mark.slow  # the sqlite store's migrations take about ten seconds


@dataclass
class Logged:
    client: MlflowClient
    tracking_uri: str
    search: Search
    search_dir: Path
    parent: Run
    children: list[Run]


def _children(client: MlflowClient, parent: Run) -> list[Run]:
    found = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
    )
    return sorted(found, key=lambda run: int(run.data.params["index"]))


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Logged:
    """One sqlite store and one logged search for the module (MLflow's migrations take s)."""
    root = tmp_path_factory.mktemp("mlflow_capacity")
    search = classify_search()
    search.with_rates = {"embed": 12.5}
    search_dir = search.write(root / "capacity")
    tracking_uri = default_tracking_uri(root / "home")
    parent_id = log_search(search_dir, tracking_uri)
    assert parent_id is not None
    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_id)
    return Logged(client, tracking_uri, search, search_dir, parent, _children(client, parent))


def test_the_parent_run_holds_the_settings_answer_and_artifacts(logged: Logged) -> None:
    parent, search = logged.parent, logged.search
    assert parent.info.run_name == search.search_id and parent.info.status == "FINISHED"
    assert logged.client.get_experiment(parent.info.experiment_id).name == "collobench"
    params = parent.data.params
    assert (params["pipeline"], params["slo_ms"], params["percentile"]) == (
        search.pipeline,
        str(search.slo_ms),
        "0.99",
    )
    assert params["precision"] == "0.05" and params["with"] == '{"embed": 12.5}'
    metrics = parent.data.metrics
    assert metrics["certified_qps"] == search.certified_qps
    assert metrics["estimate_qps"] == search.estimate_qps
    assert (metrics["estimate_ci95_low"], metrics["estimate_ci95_high"]) == search.estimate_ci95
    assert metrics["probes"] == len(search.probes)
    assert parent.data.tags["stop_reason"] == "converged"
    assert parent.data.tags["search_id"] == search.search_id
    artifacts = {item.path for item in logged.client.list_artifacts(parent.info.run_id)}
    assert {"capacity.json", "capacity_plot.png", "report.md", "search.json"} <= artifacts


def test_one_child_per_probe_with_its_figures_and_verdict(logged: Logged) -> None:
    probes = logged.search.probes
    assert len(logged.children) == len(probes)
    for index, (child, probe) in enumerate(zip(logged.children, probes, strict=True)):
        assert child.data.params["rate"] == str(probe.rate)
        assert child.data.params["seed"] == str(index)
        assert child.data.params["kind"] == probe.kind
        assert child.data.metrics["queries"] == probe.queries
        assert child.data.metrics["over_slo"] == probe.over_slo
        assert child.data.tags["verdict"] == (probe.verdict or "none")
        assert child.data.tags.get("abort_reason") == probe.abort_reason
        assert child.data.tags["flagged"] == str(probe.flagged).lower()
        # an infinite p99 (failures as +inf) is written as null and not logged
        finite = probe.p99_ms is not None and math.isfinite(probe.p99_ms)
        assert child.data.metrics.get("p99_ms") == (probe.p99_ms if finite else None)


def test_relogging_is_idempotent_and_a_resumed_search_replaces_its_record(
    logged: Logged,
) -> None:
    assert log_search(logged.search_dir, logged.tracking_uri) == logged.parent.info.run_id
    resumed = classify_search()
    resumed.with_rates = {"embed": 12.5}
    resumed.probes = resumed.probes[:-1]  # as if the last probe were new
    resumed.certified_qps = 163.6
    resumed.write(logged.search_dir.parent)
    new_id = log_search(logged.search_dir, logged.tracking_uri)
    assert new_id is not None and new_id != logged.parent.info.run_id
    client = logged.client
    assert client.get_run(logged.parent.info.run_id).info.lifecycle_stage == "deleted"
    replacement = client.get_run(new_id)
    assert replacement.data.metrics["certified_qps"] == 163.6
    assert len(_children(client, replacement)) == len(resumed.probes)


def test_a_failure_is_one_warning_and_none(
    tmp_path: Path, logged: Logged, caplog: pytest.LogCaptureFixture
) -> None:
    broken = classify_search("broken").write(tmp_path)
    (broken / CAPACITY_FILE).write_text("{")
    with caplog.at_level(logging.WARNING):
        assert log_search(broken, logged.tracking_uri) is None
    assert "could not log capacity search" in caplog.text


def test_a_slow_search_logs_its_budget_spent_time_and_unloaded_probe(
    tmp_path: Path, logged: Logged
) -> None:
    search = slow_search()
    parent_id = log_search(search.write(tmp_path), logged.tracking_uri)
    assert parent_id is not None
    parent = logged.client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    params, metrics, tags = parent.data.params, parent.data.metrics, parent.data.tags
    assert (params["budget_s"], params["min_queries"]) == ("900.0", "459")
    assert metrics["spent_s"] == 840.5 and "certified_qps" not in metrics
    assert (tags["stop_reason"], tags["stop_detail"]) == ("undecidable", UNDECIDABLE_DETAIL)
    children = _children(logged.client, parent)
    assert [child.data.params["kind"] for child in children] == [p.kind for p in search.probes]
    unloaded = children[-1]
    assert unloaded.info.run_name == "probe 3: unloaded"
    assert unloaded.data.tags["verdict"] == "met" and unloaded.data.metrics["window_s"] == 150.0
    assert [child.data.tags["cannot_pass"] for child in children] == [
        str(probe.cannot_pass).lower() for probe in search.probes
    ]
    # the settings of an older search (no budget, no minimum) are logged as null
    assert logged.parent.data.params["budget_s"] == "null"
