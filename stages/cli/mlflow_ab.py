"""Record an A/B session folder in MLflow: one parent run per session (the arms and the plan as
params, each figure's change, interval, smallest detectable change and blocks as metrics, its
verdict as a tag, session.json and the plot as artifacts). The segments are ordinary run
directories but are not logged one by one: a session is one question, its answer one record.
Same conventions as stages/cli/mlflow_capacity.py (content hash, a changed session re-logged,
never failing the caller: any MLflow error is one warning and None).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.ab.session_files import SEGMENTS_FILE, SESSION_FILE, SessionFiles, SessionRecord
from stages.cli.mlflow_client import (
    DEFAULT_EXPERIMENT,
    TAG_COMPLETE,
    TAG_KIND,
    artifact_location_for,
    delete_with_children,
    ensure_experiment,
    failed_on_error,
    log_params,
    logged_or_warned,
    open_client,
    param_value,
    text_tags,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

logger = logging.getLogger(__name__)

TAG_SESSION_ID = "session_id"
TAG_CONTENT = "collobench.content_sha256"  # what was logged: a changed session is re-logged
KIND_SESSION = "ab_session"
PLOT_FILE = "ab.png"
ARTIFACTS = (SESSION_FILE, PLOT_FILE)
# A session that ended on its own is FINISHED; one cut short (or still running) is KILLED.
_RUN_STATUS = {"failed": "FAILED", "interrupted": "KILLED", "running": "KILLED"}


def _content_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in (SESSION_FILE, SEGMENTS_FILE):
        path = folder / name
        digest.update(name.encode() + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def session_params(record: SessionRecord) -> dict[str, str]:
    """The parent run's params: what the session compared and how it was planned."""
    values: dict[str, Any] = {
        "seed": record.seed,
        "margin_pct": record.margin_pct,
        "budget_min": record.budget_min,
        "boundary": record.boundary,
        "looks": ",".join(str(n) for n in record.looks_blocks),
        "aa": record.aa,
        "mode": record.mode,
    }
    for arm in record.arms:
        values[f"arm_{arm.label}"] = arm.description or arm.spec
        if arm.revision is not None:
            values[f"arm_{arm.label}_revision"] = arm.revision
    if record.figures:
        values["figures"] = ",".join(record.figures)
    return {key: param_value(value) for key, value in values.items()}


def _number(value: object) -> float | None:
    """A finite number, else None (MLflow holds no infinity; session.json writes it as null)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _figure_key(figure: object, name: str) -> str:
    """`<pipeline>.<metric>.<name>` of a 'pipeline/metric' figure."""
    pipeline, _, metric = str(figure).rpartition("/")
    return f"{pipeline}.{metric}.{name}"


def session_metrics(record: SessionRecord, blocks_dropped: int) -> dict[str, float]:
    """The parent run's metrics: per figure its change, 95% interval (finite ends only),
    smallest detectable change and blocks; the session's kept and dropped blocks."""
    metrics: dict[str, float | None] = {"blocks_dropped": float(blocks_dropped)}
    kept = [_number(v.get("blocks")) for v in record.verdicts]
    metrics["blocks"] = max((n for n in kept if n is not None), default=None)
    for verdict in record.verdicts:
        figure = verdict.get("figure")
        interval = verdict.get("change_ci95")
        low, high = interval if isinstance(interval, list | tuple) else (None, None)
        for name, value in (
            ("change_pct", verdict.get("change_pct")),
            ("ci95_low", low),
            ("ci95_high", high),
            ("mde_pct", verdict.get("mde_pct")),
            ("blocks", verdict.get("blocks")),
        ):
            metrics[_figure_key(figure, name)] = _number(value)
    return {key: value for key, value in metrics.items() if value is not None}


def session_tags(record: SessionRecord, content: str) -> dict[str, str]:
    """The parent run's tags: what marks the record, how the session ended, each verdict."""
    tags: dict[str, object] = {
        TAG_KIND: KIND_SESSION,
        TAG_SESSION_ID: record.session_id,
        TAG_CONTENT: content,
        "status": record.status,
        "spec_hash": record.spec_hash,
        "machine_class": record.machine_class,
        "repo_dirty": str(record.repo_dirty).lower(),
    }
    for verdict in record.verdicts:
        tags[_figure_key(verdict.get("figure"), "verdict")] = verdict.get("verdict")
    return text_tags(tags)


def blocks_dropped(files: SessionFiles, record: SessionRecord) -> int:
    """How many complete blocks the judgement dropped (spoiled, with their partners): judged
    again from segments.jsonl, since session.json keeps only the verdicts."""
    from stages.ab.judgement import judge

    alpha = record.look_alpha[-1] if record.look_alpha else 0.05
    segments = files.segments()
    return len(judge(segments, record.orders, alpha, record.margin_pct, record.figures).dropped)


def _log_metrics(client: MlflowClient, run_id: str, values: Mapping[str, float]) -> None:
    from mlflow.entities import Metric

    now_ms = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in values.items()])


def _existing_parent(
    client: MlflowClient, experiment_id: str, session_id: str, content: str
) -> str | None:
    """A complete record of this very session content (returned as is); any other record of
    the session (half-written, or of fewer blocks before a resume) is deleted."""
    quoted = session_id.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.{TAG_SESSION_ID} = '{quoted}' and "
        f"tags.`{TAG_KIND}` = '{KIND_SESSION}'",
    )
    for run in runs:
        tags = run.data.tags
        if tags.get(TAG_COMPLETE) == "true" and tags.get(TAG_CONTENT) == content:
            return str(run.info.run_id)
    delete_with_children(client, experiment_id, runs)
    return None


def _log(folder: Path, tracking_uri: str, experiment: str) -> str:
    files = SessionFiles(folder)
    record = files.read()
    content = _content_hash(folder)
    client = open_client(tracking_uri)
    experiment_id = ensure_experiment(client, experiment, artifact_location_for(tracking_uri))
    existing = _existing_parent(client, experiment_id, record.session_id, content)
    if existing is not None:
        logger.info("session %s is already in MLflow as %s", record.session_id, existing)
        return existing
    dropped = blocks_dropped(files, record)
    tags = session_tags(record, content)
    parent = client.create_run(experiment_id, run_name=record.session_id, tags=tags)
    parent_id = str(parent.info.run_id)
    with failed_on_error(client, parent_id):
        log_params(client, parent_id, session_params(record))
        _log_metrics(client, parent_id, session_metrics(record, dropped))
        for name in ARTIFACTS:
            if (folder / name).exists():
                client.log_artifact(parent_id, str(folder / name))
        client.set_tag(parent_id, TAG_COMPLETE, "true")
        client.set_terminated(parent_id, status=_RUN_STATUS.get(record.status, "FINISHED"))
    return parent_id


def log_ab_session(
    session_folder: Path | str, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT
) -> str | None:
    """Log one A/B session folder to MLflow; returns the parent MLflow run id, or None (with a
    warning) on any failure: tracking never fails a session.

    Idempotent: a session logged completely with the same files is found by its `session_id`
    tag and a hash of session.json and segments.jsonl, and its id returned; an older or
    half-written record of it (a resumed session has more blocks) is replaced."""
    folder = Path(session_folder)
    return logged_or_warned(
        lambda: _log(folder, tracking_uri, experiment),
        f"A/B session {folder}",
        "session folder",
        tracking_uri,
        logger,
    )
