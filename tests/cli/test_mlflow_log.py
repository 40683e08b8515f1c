"""log_run_to_mlflow against a real MLflow sqlite store: runs, tags, params, metrics, artifacts."""

from __future__ import annotations

import json
import logging
import math
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from stages import settings
from stages.cli.mlflow_client import artifact_location_for
from stages.cli.mlflow_log import flatten_params, log_run_to_mlflow
from stages.cli.wiring import summarize_phase
from stages.rundir.tables import ChunkWriter, merge_parts
from stages.settings import default_tracking_uri

RUN_ID = "20261122-001500-vision-collocated-1a2b3c"
BASE_NS = 1_000_000_000_000
SPACING_NS = 10_000_000  # one query scheduled every 10 ms
MS = 1_000_000

SPEC: dict[str, Any] = {
    "name": "vision-collocated",
    "seed": 0,
    "repeats": 2,
    "collocation": {"mode": "time_slice", "solo_baselines": True},
    "telemetry": {"gpu": {"period_ms": 50}, "host": {"period_ms": 100}, "power_model": None},
    "pipelines": [
        {
            "name": "classify",
            "device": "cpu",
            "placement": {"cpus": [0], "threads": 1},
            "loadgen": {"type": "server", "rate": 50, "warmup_queries": 5, "slo_ms": 140},
            "stages": [
                {"id": "data", "type": "dataset.digits", "outputs": ["model"]},
                {"id": "model", "type": "torchvision.classify", "config": {"model": "x" * 7000}},
            ],
        },
        {
            "name": "embed",
            "device": "cpu",
            "loadgen": {"type": "closed_loop", "concurrency": 2},
            "stages": [{"id": "encode", "type": "sleep", "config": {"ms": 3}}],
        },
    ],
}


@dataclass
class Group:
    """Known inputs of one (trial, phase, pipeline); expected metrics are computed from them."""

    pipeline: str
    phase: str
    trial: int
    ok_latency_ms: list[float]
    n_error: int = 0
    n_dropped: int = 0
    n_timeout: int = 0
    samples: int = 1

    def columns(self) -> dict[str, list[Any]]:
        """Five slow warm-up queries, then ok, error, dropped and timeout queries."""
        rows: list[tuple[int | None, str, bool]] = [(5_000 * MS, "ok", True)] * 5  # warm-up
        rows += [(int(ms * MS), "ok", False) for ms in self.ok_latency_ms]
        rows += [(3 * MS, "error", False)] * self.n_error
        rows += [(None, "dropped", False)] * self.n_dropped
        rows += [(None, "timeout", False)] * self.n_timeout
        scheduled = [BASE_NS + i * SPACING_NS for i in range(len(rows))]
        completed = [
            s + latency if latency is not None else None
            for s, (latency, _, _) in zip(scheduled, rows, strict=True)
        ]
        return {
            "query_id": list(range(len(rows))),
            "scheduled_ns": scheduled,
            "issued_ns": scheduled,
            "completed_ns": completed,
            "status": [status for _, status, _ in rows],
            "samples": [self.samples] * len(rows),
            "warmup": [warmup for _, _, warmup in rows],
        }

    def expected(self) -> dict[str, Any]:
        """Figures computed here, independently of the analysis views: counts, queries/s over
        first scheduled .. last completion, and LoadGen's percentile (sorted[floor(N p)]) of
        every measured query, a failed one counting as +inf ("inf" in the manifest)."""
        n_warmup = 5
        n_ok = len(self.ok_latency_ms)
        scheduled = [BASE_NS + (n_warmup + i) * SPACING_NS for i in range(n_ok + self.n_error)]
        latencies = list(self.ok_latency_ms) + [3.0] * self.n_error
        last_completed = max(s + int(ms * MS) for s, ms in zip(scheduled, latencies, strict=True))
        window_s = (last_completed - BASE_NS - n_warmup * SPACING_NS) / 1e9
        failed = self.n_error + self.n_dropped + self.n_timeout
        verdict = sorted(self.ok_latency_ms + [math.inf] * failed)

        def percentile(p: float) -> float | str:
            value = verdict[min(len(verdict) - 1, math.floor(len(verdict) * p))]
            return "inf" if math.isinf(value) else value

        return {
            "queries_measured": n_ok + failed,
            "queries_ok": n_ok,
            "queries_failed": failed,
            "queries_errors": self.n_error,
            "queries_dropped": self.n_dropped,
            "queries_timeouts": self.n_timeout,
            "queries_per_s": n_ok / window_s,
            "latency_p50_ms": percentile(0.5),
            "latency_p99_ms": percentile(0.99),
        }


GROUPS = [
    Group(
        "classify",
        "solo",
        0,
        [float(ms) for ms in range(1, 101)],
        n_error=1,
        n_dropped=2,
        n_timeout=1,
    ),
    Group("classify", "collocated", 0, [2.0 * ms for ms in range(1, 51)], n_dropped=3),
    Group("classify", "collocated", 1, [3.0 * ms for ms in range(1, 51)], n_error=2),
    Group("embed", "collocated", 0, [7.0] * 20, samples=4),
    Group("embed", "collocated", 1, [9.0] * 20, samples=4),
]


def write_run_dir(run_dir: Path, *, merge: bool = True) -> None:
    """A small run directory as the launcher leaves it: merged tables and a manifest."""
    for index, group in enumerate(GROUPS):
        keys = {
            "run_id": RUN_ID,
            "trial": group.trial,
            "phase": group.phase,
            "pipeline": group.pipeline,
        }
        writer = ChunkWriter(run_dir, "queries", f"w{index}", keys)
        writer.write_columns(group.columns())
    if merge:
        merge_parts(run_dir)
    manifest = {
        "format_version": 1,
        "run_id": RUN_ID,
        "name": SPEC["name"],
        "spec": SPEC,
        "spec_hash": "ab" * 32,
        "spec_source": "specs/vision.yaml",
        "clock": {"monotonic_ns": 123, "wall_time_ns": 456},
        "started_at": "2026-11-22T00:15:00+00:00",
        "ended_at": "2026-11-22T00:16:00+00:00",
        "status": "failed",
        "environment": {"hostname": "vm", "git": {"commit": "c" * 40, "dirty": False}},
        "energy": {"gpu_source": None, "host_source": "rapl"},
        "warnings": [],
        "results": [
            {
                "trial": g.trial,
                "phase": g.phase,
                "pipeline": g.pipeline,
                "status": "failed" if (g.pipeline, g.trial) == ("embed", 1) else "ok",
                "error": "boom" if (g.pipeline, g.trial) == ("embed", 1) else None,
                "exit_code": 0,
            }
            for g in GROUPS
        ],
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    # As the launcher does at each phase end: the figures the analysis views compute.
    for result in manifest["results"]:
        figures, _ = summarize_phase(run_dir, result["trial"], result["phase"])
        mine = figures[result["pipeline"]]
        result.update(summary=mine.metrics, slo_verdict=mine.slo_verdict)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


@dataclass
class Logged:
    client: MlflowClient
    tracking_uri: str
    home: Path
    run_dir: Path
    parent: Run
    children: dict[tuple[str, str], Run]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Logged:
    """One sqlite store and one logged run for the whole module (migrations take seconds)."""
    root = tmp_path_factory.mktemp("mlflow")
    home = root / "home"
    run_dir = root / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    write_run_dir(run_dir)
    tracking_uri = default_tracking_uri(home)

    parent_id = log_run_to_mlflow(run_dir, tracking_uri)

    assert parent_id is not None
    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_id)
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'"
    )
    by_pair = {(c.data.tags["pipeline"], c.data.tags["phase"]): c for c in children}
    return Logged(client, tracking_uri, home, run_dir, parent, by_pair)


def test_default_tracking_uri_is_absolute_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = default_tracking_uri(tmp_path / "home")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("COLLOBENCH_MLFLOW", raising=False)
    monkeypatch.setenv("COLLOBENCH_HOME", str(tmp_path / "home"))
    assert settings.mlflow_tracking_uri() == uri  # the CLI's default is this store
    assert uri == f"sqlite:///{(tmp_path / 'home').resolve()}/mlflow.db"
    assert uri.startswith("sqlite:////")
    assert artifact_location_for(uri) == (tmp_path / "home" / "mlartifacts").resolve().as_uri()
    assert artifact_location_for("http://localhost:5000") is None


def test_parent_run_has_name_tags_params_and_status(logged: Logged) -> None:
    parent = logged.parent
    assert parent.info.run_name == RUN_ID
    assert parent.info.status == "FAILED"  # the benchmark run's status was "failed"
    experiment = logged.client.get_experiment(parent.info.experiment_id)
    assert experiment.name == "collobench"
    tags = parent.data.tags
    assert tags["spec_name"] == "vision-collocated"
    assert tags["spec_hash"] == "ab" * 32
    assert tags["status"] == "failed"
    assert tags["run_id"] == RUN_ID
    assert "mlflow.parentRunId" not in tags
    params = parent.data.params
    assert params["seed"] == "0"
    assert params["collocation.mode"] == "time_slice"
    assert params["pipelines.classify.loadgen.rate"] == "50"
    assert params["pipelines.classify.placement.cpus"] == "[0]"
    assert params["pipelines.embed.stages.encode.config.ms"] == "3"
    long_value = params["pipelines.classify.stages.model.config.model"]
    assert len(long_value) == 6000 and set(long_value) == {"x"}  # truncated, not rejected
    started = datetime.fromisoformat("2026-11-22T00:15:00+00:00")
    assert parent.info.start_time == int(started.timestamp() * 1000)
    ended = datetime.fromisoformat("2026-11-22T00:16:00+00:00")
    assert parent.info.end_time == int(ended.timestamp() * 1000)


def test_one_nested_child_per_pipeline_and_phase(logged: Logged) -> None:
    assert set(logged.children) == {
        ("classify", "solo"),
        ("classify", "collocated"),
        ("embed", "collocated"),
    }
    for (pipeline, phase), child in logged.children.items():
        assert child.data.tags["mlflow.parentRunId"] == logged.parent.info.run_id
        assert child.data.tags["pipeline"] == pipeline
        assert child.data.tags["phase"] == phase
        assert child.data.params["name"] == pipeline
    classify = logged.children[("classify", "solo")].data.params
    assert classify["loadgen.type"] == "server"
    assert classify["stages.data.type"] == "dataset.digits"
    assert "stages.encode.type" not in classify  # another pipeline's spec
    embed = logged.children[("embed", "collocated")]
    assert embed.data.tags["status"] == "failed"
    assert embed.data.tags["error"] == "boom"
    assert embed.info.status == "FAILED"
    assert logged.children[("classify", "solo")].info.status == "FINISHED"


def test_slo_verdicts_are_tags_per_trial_and_the_worst(logged: Logged) -> None:
    """classify (slo_ms 140): solo, 4 failures in 104 queries: undecided; collocated trial 0,
    3 dropped in 53: undecided; trial 1, 4 over 140 ms and 2 errors in 52: missed. The tags
    are the manifest's verdicts; embed has no SLO, so no verdict tag."""
    manifest = json.loads((logged.run_dir / "manifest.json").read_text())
    verdicts: dict[tuple[str, str], dict[int, str]] = {}
    for result in manifest["results"]:
        if result["slo_verdict"] is not None:
            key = (result["pipeline"], result["phase"])
            verdicts.setdefault(key, {})[result["trial"]] = result["slo_verdict"]
    assert verdicts == {
        ("classify", "solo"): {0: "undecided"},
        ("classify", "collocated"): {0: "undecided", 1: "missed"},
    }
    for key, by_trial in verdicts.items():
        tags = logged.children[key].data.tags
        for trial, verdict in by_trial.items():
            assert tags[f"slo_verdict.{trial}"] == verdict
    assert logged.children[("classify", "solo")].data.tags["slo_verdict"] == "undecided"
    assert logged.children[("classify", "collocated")].data.tags["slo_verdict"] == "missed"
    assert logged.children[("classify", "collocated")].data.metrics["slo_missed"] == 1.0
    assert not any(k.startswith("slo_") for k in logged.children[("embed", "collocated")].data.tags)


def _logged_at_trial(logged: Logged, child: Run, trial: int) -> dict[str, float]:
    values = {}
    for key in child.data.metrics:
        history = logged.client.get_metric_history(child.info.run_id, key)
        at_trial = [m.value for m in history if m.step == trial]
        if at_trial:
            (values[key],) = at_trial
    return values


def test_metrics_are_the_manifests_figures_per_trial(logged: Logged) -> None:
    """Finding 9: MLflow logs exactly the figures the manifest holds (the views' figures), not
    a second computation; infinite percentiles are not logged (MLflow rejects inf)."""
    manifest = json.loads((logged.run_dir / "manifest.json").read_text())
    assert manifest["results"]  # no results would pass the loop below vacuously
    for result in manifest["results"]:
        child = logged.children[(result["pipeline"], result["phase"])]
        expected = {
            key: value
            for key, value in result["summary"].items()
            if isinstance(value, int | float) and math.isfinite(value)
        }
        assert _logged_at_trial(logged, child, result["trial"]) == pytest.approx(expected)


def test_figures_match_independent_computation(logged: Logged) -> None:
    manifest = json.loads((logged.run_dir / "manifest.json").read_text())
    for group in GROUPS:
        (result,) = [
            r
            for r in manifest["results"]
            if (r["trial"], r["phase"], r["pipeline"]) == (group.trial, group.phase, group.pipeline)
        ]
        for key, value in group.expected().items():
            assert result["summary"][key] == (
                value if isinstance(value, str) else pytest.approx(value, rel=1e-9)
            ), (group, key)


def test_a_failed_tail_is_infinite_and_not_logged(logged: Logged) -> None:
    solo = logged.children[("classify", "solo")]
    # 100 ok (1..100 ms) and 4 failed: p50 is sorted[52] = 53 ms, p99 lands on a failure.
    assert solo.data.metrics["latency_p50_ms"] == pytest.approx(53.0)
    assert "latency_p99_ms" not in solo.data.metrics
    assert solo.data.metrics["completed_p99_ms"] == pytest.approx(100.0)


@pytest.mark.slow
def test_a_result_without_figures_logs_only_its_counts(logged: Logged, tmp_path: Path) -> None:
    run_dir = tmp_path / "no-figures"
    run_dir.mkdir()
    write_run_dir(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["run_id"] = "no-figures"
    for result in manifest["results"]:
        del result["summary"]
        result.update(ok=7, errors=1, dropped=2, timeouts=0, not_issued=3)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))

    parent_id = log_run_to_mlflow(run_dir, logged.tracking_uri, experiment="no-figures")

    assert parent_id is not None
    (child,) = logged.client.search_runs(
        [logged.client.get_run(parent_id).info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}' and tags.pipeline = 'embed'",
    )
    assert _logged_at_trial(logged, child, 0) == {
        "queries_ok": 7,
        "queries_errors": 1,
        "queries_dropped": 2,
        "queries_timeouts": 0,
        "queries_not_issued": 3,
    }


def test_run_files_are_artifacts_of_the_parent(logged: Logged) -> None:
    names = {f.path for f in logged.client.list_artifacts(logged.parent.info.run_id)}
    assert names == {"manifest.json", "queries.parquet"}
    artifact_root = logged.home / "mlartifacts"
    assert list(artifact_root.rglob("queries.parquet"))  # beside the db, not in ./mlruns


def test_logging_the_same_run_twice_reuses_the_record(logged: Logged) -> None:
    again = log_run_to_mlflow(logged.run_dir, logged.tracking_uri)
    assert again == logged.parent.info.run_id
    parents = logged.client.search_runs(
        [logged.parent.info.experiment_id], filter_string=f"tags.run_id = '{RUN_ID}'"
    )
    assert len(parents) == 1 + len(logged.children)


def test_unmerged_run_logs_chunk_files(logged: Logged, tmp_path: Path) -> None:
    run_dir = tmp_path / "cut-short"
    run_dir.mkdir()
    write_run_dir(run_dir, merge=False)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["run_id"] = "cut-short"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))

    parent_id = log_run_to_mlflow(run_dir, logged.tracking_uri, experiment="cut")

    assert parent_id is not None
    names = {f.path for f in logged.client.list_artifacts(parent_id)}
    assert names == {"manifest.json", "parts"}
    assert logged.client.list_artifacts(parent_id, "parts/queries")


@pytest.mark.parametrize(
    "make_uri",
    [
        lambda tmp: f"sqlite:///{tmp / 'a-file' / 'mlflow.db'}",  # parent is a regular file
        lambda tmp: "nonsense-scheme://nowhere",
    ],
    ids=["unwritable-sqlite", "unknown-scheme"],
)
def test_bad_tracking_uri_warns_and_returns_none(
    logged: Logged, tmp_path: Path, caplog: pytest.LogCaptureFixture, make_uri: Any
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="stages.cli.mlflow_log"):
        assert log_run_to_mlflow(logged.run_dir, make_uri(tmp_path)) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "could not log run" in warnings[0].getMessage()


def test_mlflow_import_error_warns_and_returns_none(
    logged: Logged, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # makes `import mlflow` raise ImportError
    with caplog.at_level(logging.WARNING, logger="stages.cli.mlflow_log"):
        assert log_run_to_mlflow(logged.run_dir, logged.tracking_uri) is None
    assert any("import of mlflow halted" in r.getMessage() for r in caplog.records)


def test_missing_manifest_warns_and_returns_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="stages.cli.mlflow_log"):
        result = log_run_to_mlflow(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert result is None
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_flatten_params_names_list_items_and_cleans_keys() -> None:
    flat = flatten_params(
        {"a": {"b": 1, "c": [1, 2], "d": None}, "s": [{"id": "x/y", "v": True}, {"v": False}]}
    )
    assert flat == {
        "a.b": "1",
        "a.c": "[1, 2]",
        "a.d": "null",
        "s.x_y.id": "x/y",
        "s.x_y.v": "true",
        "s.1.v": "false",
    }
