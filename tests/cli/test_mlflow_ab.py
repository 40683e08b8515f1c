"""log_ab_session against a real MLflow sqlite store, on a session folder written with the
session's own models (SessionFiles, no real runs): one parent run with the arms and the plan as
params, each figure's change, interval, smallest change and blocks as metrics and its verdict
as a tag, session.json and ab.png as artifacts; re-logging is idempotent, a resumed session
replaces its record, and a folder without a session is one warning."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from stages.ab.session_files import ArmRecord, SegmentRecord, SessionFiles, SessionRecord
from stages.ab.stats.block_orders import BlockOrder
from stages.ab.stats.verdict import FigureVerdict
from stages.cli.mlflow_ab import KIND_SESSION, log_ab_session
from stages.settings import default_tracking_uri

pytestmark = pytest.mark.slow  # the sqlite store's migrations take about ten seconds

SESSION_ID = "20260201-120000-ab-demo-abc123"
ORDERS: list[BlockOrder] = ["AB", "BA", "AB", "BA", "BA", "AB"]
QPS = "demo/queries_per_s"
P99 = "demo/latency_p99_ms"


def _verdict(figure: str, verdict: str, change: float, ci95: tuple[float, float]) -> dict:
    """A figure's verdict as the session runner stores it (model_dump in JSON mode)."""
    return FigureVerdict.model_validate(
        {
            "figure": figure,
            "verdict": verdict,
            "change_pct": change,
            "change_ci95": ci95,
            "change_ci90": ci95,
            "p_value": 0.01,
            "p_holm": 0.02,
            "mde_pct": 3.5 if math.isfinite(ci95[1]) else math.inf,
            "blocks": 4,
            "sd_log": 0.02,
            "method": "exact",
            "paired_t_change_pct": change,
            "paired_t_ci95": ci95,
        }
    ).model_dump(mode="json")


def _record(blocks: int) -> SessionRecord:
    return SessionRecord(
        session_id=SESSION_ID,
        created_at="2026-02-01T12:00:00+00:00",
        arms=[
            ArmRecord(
                label="A",
                python="/venv/a/python",
                spec="specs/ab_demo.yaml",
                description="specs/ab_demo.yaml at abc",
            ),
            ArmRecord(
                label="B",
                python="/venv/b/python",
                spec="specs/ab_demo.yaml",
                description="specs/ab_demo.yaml at def",
                revision="d" * 40,
            ),
        ],
        seed=1234,
        margin_pct=5.0,
        budget_min=15.0,
        boundary="obrien-fleming",
        looks_blocks=[4, 6],
        look_alpha=[0.01, 0.05],
        orders=ORDERS[:blocks],
        block_seeds=list(range(blocks)),
        status="decided",
        spec_hash="f" * 64,
        verdicts=[
            _verdict(QPS, "regressed", -8.0, (-12.0, -4.0)),
            _verdict(P99, "undecided", 2.0, (-3.0, math.inf)),
        ],
    )


def _segment(block: int, arm: str, status: str = "ok") -> SegmentRecord:
    order = ORDERS[block]
    return SegmentRecord(
        session_id=SESSION_ID,
        block=block,
        order=order,
        arm="A" if arm == "A" else "B",
        position=order.index(arm),
        seed=block,
        run_id=f"block-{block:03d}-{arm}",
        run_dir=f"runs/block-{block:03d}-{arm}",
        status=status,
        wall_s=1.5,
        values={QPS: 100.0 if arm == "A" else 92.0, P99: 20.0} if status == "ok" else {},
        higher_is_worse={"queries_per_s": False, "latency_p99_ms": True},
    )


def write_session(folder: Path, blocks: int, spoiled: int | None = None) -> Path:
    """A session folder: session.json, `blocks` complete blocks in segments.jsonl (arm B's
    segment of block `spoiled` failed) and a stand-in ab.png."""
    files = SessionFiles(folder)
    if not (folder / "session.json").exists():
        files.create(_record(blocks))
    else:
        files.write(_record(blocks))
    (folder / "segments.jsonl").unlink(missing_ok=True)
    for block in range(blocks):
        for arm in ORDERS[block]:
            files.append(_segment(block, arm, "failed" if (block, arm) == (spoiled, "B") else "ok"))
    (folder / "ab.png").write_bytes(b"\x89PNG stand-in")
    return folder


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Run]:
    """One sqlite store and one logged session (block 1 spoiled) for the module."""
    root = tmp_path_factory.mktemp("mlflow_ab")
    folder = write_session(root / "ab" / SESSION_ID, blocks=4, spoiled=1)
    tracking_uri = default_tracking_uri(root / "home")
    run_id = log_ab_session(folder, tracking_uri)
    assert run_id is not None
    return tracking_uri, folder, MlflowClient(tracking_uri).get_run(run_id)


def test_one_parent_run_holds_the_plan_the_figures_and_the_files(
    store: tuple[str, Path, Run],
) -> None:
    tracking_uri, _, run = store
    assert run.info.run_name == SESSION_ID and run.info.status == "FINISHED"
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["arm_A"] == "specs/ab_demo.yaml at abc"
    assert params["arm_B"] == "specs/ab_demo.yaml at def" and params["arm_B_revision"] == "d" * 40
    assert (params["seed"], params["margin_pct"], params["budget_min"]) == ("1234", "5.0", "15.0")
    assert (params["boundary"], params["looks"], params["aa"], params["mode"]) == (
        "obrien-fleming",
        "4,6",
        "false",
        "interleaved",
    )
    assert metrics["demo.queries_per_s.change_pct"] == -8.0
    assert (metrics["demo.queries_per_s.ci95_low"], metrics["demo.queries_per_s.ci95_high"]) == (
        -12.0,
        -4.0,
    )
    assert metrics["demo.queries_per_s.mde_pct"] == 3.5
    assert metrics["demo.queries_per_s.blocks"] == 4 and metrics["blocks"] == 4
    # an infinite end and an infinite mde (null in session.json) are not logged
    assert metrics["demo.latency_p99_ms.ci95_low"] == -3.0
    assert "demo.latency_p99_ms.ci95_high" not in metrics
    assert "demo.latency_p99_ms.mde_pct" not in metrics
    # block 1 (BA) spoiled: it and an AB partner go, judged again from segments.jsonl
    assert metrics["blocks_dropped"] == 2
    assert tags["collobench.kind"] == KIND_SESSION and tags["session_id"] == SESSION_ID
    assert tags["demo.queries_per_s.verdict"] == "regressed"
    assert tags["demo.latency_p99_ms.verdict"] == "undecided"
    assert tags["status"] == "decided"
    artifacts = {item.path for item in MlflowClient(tracking_uri).list_artifacts(run.info.run_id)}
    assert artifacts == {"session.json", "ab.png"}


def _session_runs(client: MlflowClient, experiment_id: str) -> list[Run]:
    return client.search_runs([experiment_id], filter_string=f"tags.session_id = '{SESSION_ID}'")


def test_relogging_is_idempotent_and_a_resumed_session_replaces_its_record(
    store: tuple[str, Path, Run],
) -> None:
    tracking_uri, folder, run = store
    client = MlflowClient(tracking_uri)
    assert log_ab_session(folder, tracking_uri) == run.info.run_id
    assert len(_session_runs(client, run.info.experiment_id)) == 1
    write_session(folder, blocks=6, spoiled=1)  # resumed: two more blocks
    new_id = log_ab_session(folder, tracking_uri)
    assert new_id is not None and new_id != run.info.run_id
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"
    assert [r.info.run_id for r in _session_runs(client, run.info.experiment_id)] == [new_id]


def test_a_folder_without_a_session_is_one_warning_and_none(
    tmp_path: Path, store: tuple[str, Path, Run], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert log_ab_session(tmp_path, store[0]) is None
    assert "could not log A/B session" in caplog.text
