"""Record a capacity search directory in MLflow: one parent run per search (its settings as
params, the answer and the time spent as metrics, the stop reason and its evidence as tags,
capacity.json and the plot as artifacts) and one nested child per probe (rate, seed and kind as
params; queries, over-SLO count, p99 and the planned window as metrics; the verdict and
cannot_pass as tags; the ceiling and unloaded probes are children too, at rate 0). Same
conventions as stages/cli/mlflow_log.py, through the same helpers (stages/cli/mlflow_client.py:
experiment, tags, quiet MLflow, never failing the caller: any MLflow error is one warning and
None).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.cli.mlflow_client import (
    DEFAULT_EXPERIMENT,
    TAG_COMPLETE,
    TAG_KIND,
    TAG_PARENT,
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
from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    PROBES_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeRecord,
    SearchSettings,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

logger = logging.getLogger(__name__)

TAG_SEARCH_ID = "search_id"
TAG_CONTENT = "collobench.content_sha256"  # what was logged: a changed search is re-logged
KIND_SEARCH = "capacity_search"
KIND_PROBE = "capacity_probe"
# The files logged as the parent's artifacts when present (report.md and the plot are written
# by analysis.capacity.report_markdown.write_search_report, which log_search calls when the plot is
# missing).
ARTIFACTS = (SEARCH_FILE, PROBES_FILE, CAPACITY_FILE, "report.md", "capacity_plot.png")


def read_search_dir(
    search_dir: Path,
) -> tuple[SearchSettings, CapacityResult | None, list[ProbeRecord]]:
    """search.json, capacity.json (None while the search is unfinished) and the probes
    (capacity.json's, else probes.jsonl's, a torn last line ignored), through the analysis
    layer's typed reader (the composition root meets analysis); a search without search.json
    cannot be logged (ValueError)."""
    from analysis.capacity.file_reader import read_search

    files = read_search(search_dir)
    if files.settings is None:
        raise ValueError(f"{search_dir}: no {SEARCH_FILE}")
    return files.settings, files.result, files.probes


def _content_hash(search_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in (SEARCH_FILE, PROBES_FILE, CAPACITY_FILE):
        path = search_dir / name
        digest.update(name.encode() + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def _finite_metrics(values: Mapping[str, float | int | None]) -> dict[str, float]:
    """The values MLflow can hold: numbers that are finite (a p99 of +inf is not logged)."""
    return {
        key: float(value)
        for key, value in values.items()
        if value is not None and math.isfinite(float(value))
    }


def search_params(settings: SearchSettings) -> dict[str, str]:
    """The parent run's params: what the search was asked."""
    values: dict[str, Any] = {
        "pipeline": settings.pipeline,
        "slo_ms": settings.slo_ms,
        "percentile": settings.percentile,
        "precision": settings.precision,
        "max_probes": settings.max_probes,
        "probe_s": settings.probe_s,
        "with": settings.with_rates,
        "base_seed": settings.base_seed,
        "min_rate": settings.min_rate,
        "min_queries": settings.min_queries,  # null: LoadGen's minimum for the percentile
        "budget_s": settings.budget_s,  # null: unbounded
    }
    if settings.ray is not None:
        values["ray"] = settings.ray
    if settings.ray_slo_ms is not None:  # each ray pipeline's SLO (slo_ms: the smallest)
        values["ray_slo_ms"] = settings.ray_slo_ms
    return {key: param_value(value) for key, value in values.items()}


def search_metrics(result: CapacityResult | None, probes: list[ProbeRecord]) -> dict[str, float]:
    """The parent run's metrics: the answer (certified, estimate and its interval, bracket)
    and how it was reached; only `probes` while the search is unfinished."""
    if result is None:
        return {"probes": float(len(probes))}
    low, high = result.estimate_ci95 or (None, None)
    return _finite_metrics(
        {
            "certified_qps": result.certified_qps,
            "estimate_qps": result.estimate_qps,
            "estimate_ci95_low": low,
            "estimate_ci95_high": high,
            "bracket_lo": result.bracket[0],
            "bracket_hi": result.bracket[1],
            "ceiling_qps": result.ceiling_qps,
            "probes": len(probes),
            "flagged_probes": result.flagged_probes,
            "monotonicity_violations": result.monotonicity_violations,
            "spent_s": result.spent_s,
        }
    )


def probe_metrics(probe: ProbeRecord) -> dict[str, float]:
    """A probe child's metrics: the target's counts and figures."""
    share = probe.over_slo / probe.queries if probe.queries else None
    return _finite_metrics(
        {
            "queries": probe.queries,
            "over_slo": probe.over_slo,
            "over_slo_share": share,
            "p99_ms": probe.p99_ms,
            "throughput_qps": probe.throughput_qps,
            "duration_s": probe.duration_s,
            "window_s": probe.window_s,
        }
    )


def _log_metrics(client: MlflowClient, run_id: str, values: Mapping[str, float]) -> None:
    from mlflow.entities import Metric

    now_ms = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in values.items()])


def _log_probe(
    client: MlflowClient, experiment_id: str, parent_id: str, search_id: str, probe: ProbeRecord
) -> str:
    tags = text_tags(
        {
            TAG_PARENT: parent_id,
            TAG_KIND: KIND_PROBE,
            TAG_SEARCH_ID: search_id,
            "verdict": probe.verdict or "none",
            "abort_reason": probe.abort_reason,
            "flagged": str(probe.flagged).lower(),
            "cannot_pass": str(probe.cannot_pass).lower(),
            "run_dir": probe.run_dir,
        }
    )
    # the ceiling and unloaded probes run closed loop: their rate (0) names nothing
    at = f" at {probe.rate:g}" if probe.kind == "search" else ""
    name = f"probe {probe.index}: {probe.kind}{at}"
    child = client.create_run(experiment_id, tags=tags, run_name=name)
    child_id = str(child.info.run_id)
    params = {"rate": probe.rate, "seed": probe.seed, "kind": probe.kind, "index": probe.index}
    log_params(client, child_id, {key: param_value(value) for key, value in params.items()})
    _log_metrics(client, child_id, probe_metrics(probe))
    client.set_terminated(child_id, status="FAILED" if probe.abort_reason else "FINISHED")
    return child_id


def _existing_parent(
    client: MlflowClient, experiment_id: str, search_id: str, content: str
) -> str | None:
    """A complete record of this very search content (returned as is); any other record of
    the search (half-written, or of fewer probes before a resume) is deleted with its
    children."""
    quoted = search_id.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.{TAG_SEARCH_ID} = '{quoted}' and tags.`{TAG_KIND}` = '{KIND_SEARCH}'",
    )
    for run in runs:
        tags = run.data.tags
        if tags.get(TAG_COMPLETE) == "true" and tags.get(TAG_CONTENT) == content:
            return str(run.info.run_id)
    delete_with_children(client, experiment_id, runs)
    return None


def _ensure_report(search_dir: Path) -> None:
    """report.md and the plot, written by the analysis layer when the plot is missing; a
    failure is a warning (the search is still logged, without them)."""
    if (search_dir / "capacity_plot.png").exists():
        return
    from analysis.capacity.report_markdown import (
        write_search_report,  # the composition root meets analysis
    )

    try:
        write_search_report(search_dir)
    except Exception as error:
        logger.warning("no report for capacity search %s: %s", search_dir, error)


def _log(search_dir: Path, tracking_uri: str, experiment: str) -> str:
    settings, result, probes = read_search_dir(search_dir)
    content = _content_hash(search_dir)
    client = open_client(tracking_uri)
    experiment_id = ensure_experiment(client, experiment, artifact_location_for(tracking_uri))
    existing = _existing_parent(client, experiment_id, settings.search_id, content)
    if existing is not None:
        logger.info("search %s is already in MLflow as %s", settings.search_id, existing)
        return existing
    _ensure_report(search_dir)
    tags = {
        TAG_KIND: KIND_SEARCH,
        TAG_SEARCH_ID: settings.search_id,
        TAG_CONTENT: content,
        "stop_reason": result.stop_reason if result is not None else "unfinished",
        "stop_detail": result.stop_detail if result is not None else None,
        "pipeline": settings.pipeline,
        "spec_hash": settings.spec_hash,
        "spec_source": settings.spec_source,
    }
    parent = client.create_run(experiment_id, run_name=settings.search_id, tags=text_tags(tags))
    parent_id = str(parent.info.run_id)
    with failed_on_error(client, parent_id):
        log_params(client, parent_id, search_params(settings))
        _log_metrics(client, parent_id, search_metrics(result, probes))
        for probe in probes:
            _log_probe(client, experiment_id, parent_id, settings.search_id, probe)
        for name in ARTIFACTS:
            if (search_dir / name).exists():
                client.log_artifact(parent_id, str(search_dir / name))
        client.set_tag(parent_id, TAG_COMPLETE, "true")
        client.set_terminated(parent_id, status="FINISHED" if result is not None else "KILLED")
    return parent_id


def log_search(
    search_dir: Path | str, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT
) -> str | None:
    """Log one capacity search directory to MLflow; returns the parent MLflow run id, or None
    (with a warning) on any failure: tracking never fails a search.

    Idempotent: a search logged completely with the same files is found by its `search_id` tag
    and a hash of search.json, probes.jsonl and capacity.json, and its id returned; an older
    or half-written record of the search (a resumed search has more probes) is replaced."""
    folder = Path(search_dir)
    return logged_or_warned(
        lambda: _log(folder, tracking_uri, experiment),
        f"capacity search {folder}",
        "search directory",
        tracking_uri,
        logger,
    )
