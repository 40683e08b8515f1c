"""Asset checks of a loaded benchmark run (on the `warehouse` asset, evaluated in its step).

- `validity`: the run can be trusted: no failed pipeline, every phase measured at least its
  `min_queries` (and at least one), telemetry without gaps longer than 3 sampling periods in
  any load window, no foreign compute process on the GPU, and no harness start-up work (the
  environment probe) overlapping a load window.
- `regression` and `reproducibility`: judged against the benchmark's history (between-run
  spread and change points, not one run's interval), in bench_defs.checks.history_checks.
- `slo`: each pipeline's verdict on its SLO (the `slo_verdicts` view): a warning when any is
  `missed`; `undecided` ones (too few queries to tell) are listed as such, not failed.

Each function takes a read-only DuckDB connection and returns an AssetCheckResult.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import dagster as dg

from stages.contracts.warnings import WarningCode
from stages.rundir.manifest import Manifest, TimelineEntry, parse_manifest

VALIDITY = "validity"
REGRESSION = "regression"
REPRODUCIBILITY = "reproducibility"
SLO = "slo"
GAP_PERIODS = 3.0
"""A telemetry gap longer than this many sampling periods invalidates a window."""
SCHEDULE_TOLERANCE_NS = 1_000
"""Arrival offsets of two reruns may differ by rounding only."""
HARNESS_TIMELINE = ("phase", "idle")
"""Timeline entries that are measurement, not harness work."""


def check_specs(asset: Any) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            VALIDITY,
            asset=asset,
            description="No failed pipeline, minimum queries met, telemetry gaps <= 3 periods, "
            "no foreign GPU process, no start-up work inside a load window.",
        ),
        dg.AssetCheckSpec(
            REGRESSION,
            asset=asset,
            description="A figure (throughput, p50, p99) regressed against the benchmark's "
            "history on this machine class: a persistent shift beyond the between-run band "
            "(analysis.history.verdicts); a short history passes as undecided.",
        ),
        dg.AssetCheckSpec(
            REPRODUCIBILITY,
            asset=asset,
            description="A rerun of the same spec hash and seeds: the same arrival schedule as "
            "the previous run, and no figure moved beyond the between-run band (with its "
            "likely cause when one did).",
        ),
        dg.AssetCheckSpec(
            SLO,
            asset=asset,
            description="Each pipeline's SLO verdict (met, missed or undecided at 99% "
            "confidence, failures over the SLO); warns when any is missed.",
        ),
    ]


@dataclass(frozen=True)
class LoadedRun:
    run_id: str
    spec_hash: str | None
    status: str
    manifest: Manifest


def loaded_run(connection: Any, run_id: str) -> LoadedRun | None:
    """A run's row in the warehouse (None when it is not loaded)."""
    row = connection.execute(
        "SELECT run_id, spec_hash, status, manifest FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    if row is None:
        return None
    document = row[3] if isinstance(row[3], dict) else json.loads(row[3] or "{}")
    # A manifest kept before run_id was required of it: the warehouse row has the id.
    manifest = parse_manifest({"run_id": str(row[0]), **document}, f"runs[{row[0]}].manifest")
    return LoadedRun(str(row[0]), row[1], str(row[2]), manifest)


def markdown_lines(lines: list[str]) -> dg.MetadataValue:
    return dg.MetadataValue.md("\n".join(f"- {line}" for line in lines) or "none")


# ----------------------------------------------------------------------------- validity


def sql_file(name: str) -> str:
    """The text of `bench_defs/sql/<name>` (works from a wheel as from a checkout)."""
    return resources.files("bench_defs").joinpath("sql", name).read_text(encoding="utf-8")


def validity_problems(connection: Any, run_id: str) -> list[str]:
    """Every reason the run's figures cannot be trusted (empty: valid)."""
    run = loaded_run(connection, run_id)
    if run is None:
        return [f"run {run_id} is not loaded"]
    manifest = run.manifest
    problems = [] if run.status == "ok" else [f"run status is {run.status}"]
    problems += [
        f"trial {outcome.trial} {outcome.phase} {outcome.pipeline}: {outcome.status}: "
        f"{outcome.error}"
        for outcome in manifest.results
        if outcome.status != "ok"
    ]
    problems += _too_few_queries(connection, run_id, manifest)
    problems += _telemetry_gaps(connection, run_id, manifest)
    problems += [
        w.message for w in manifest.warning_records if w.code == WarningCode.FOREIGN_COMPUTE_PROCESS
    ]
    problems += _harness_work_in_windows(connection, run_id, manifest.timeline)
    return problems


def _too_few_queries(connection: Any, run_id: str, manifest: Manifest) -> list[str]:
    """Phases that measured fewer queries than their pipeline's `min_queries` (at least 1)."""
    minimum = {p.name: max(1, p.loadgen.min_queries or 0) for p in manifest.spec.pipelines}
    measured = {
        (int(trial), str(phase), str(pipeline)): int(queries)
        for trial, phase, pipeline, queries in connection.execute(
            "SELECT trial, phase, pipeline, queries FROM throughput WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    problems = []
    for outcome in manifest.results:
        key = (outcome.trial, outcome.phase, outcome.pipeline)
        wanted = minimum.get(outcome.pipeline, 1)
        if measured.get(key, 0) < wanted:
            problems.append(
                f"trial {key[0]} {key[1]} {key[2]}: {measured.get(key, 0)} measured queries, "
                f"fewer than the minimum {wanted}"
            )
    return problems


def _telemetry_gaps(connection: Any, run_id: str, manifest: Manifest) -> list[str]:
    """Telemetry gaps longer than GAP_PERIODS sampling periods inside a load window."""
    telemetry = manifest.spec.telemetry
    gaps = connection.execute(
        sql_file("telemetry_gaps.sql"),
        {
            "run": run_id,
            "host_period_ms": telemetry.host.period_ms,
            "host_enabled": telemetry.host.enabled,
            "gpu_period_ms": telemetry.gpu.period_ms,
            "periods": GAP_PERIODS,
        },
    ).fetchall()
    return [
        f"trial {trial} {f'{phase} {pipeline}' if pipeline else phase}: {series} telemetry gap "
        f"of {gap_ms:.0f} ms in the load window (period {period_ms:g} ms, allowed "
        f"{GAP_PERIODS:g} periods)"
        for trial, phase, pipeline, series, gap_ms, period_ms in gaps
    ]


def _harness_work_in_windows(
    connection: Any, run_id: str, timeline: list[TimelineEntry]
) -> list[str]:
    """Harness work (the environment probe) that overlapped a load window."""
    windows = connection.execute(
        "SELECT trial, phase, pipeline, window_start_ns, window_end_ns FROM load_windows "
        "WHERE run_id = ?",
        [run_id],
    ).fetchall()
    return [
        f"{entry.what} ran inside the load window of trial {trial} {phase}"
        f"{f' ({pipeline})' if pipeline else ''}"
        for entry in timeline
        if entry.what not in HARNESS_TIMELINE and entry.end_ns is not None
        for trial, phase, pipeline, start_ns, end_ns in windows
        if entry.start_ns < end_ns and entry.end_ns > start_ns
    ]


def validity_result(connection: Any, run_id: str) -> dg.AssetCheckResult:
    problems = validity_problems(connection, run_id)
    return dg.AssetCheckResult(
        check_name=VALIDITY,
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="valid" if not problems else f"{len(problems)} problem(s): {problems[0]}",
        metadata={"run_id": run_id, "problems": markdown_lines(problems)},
    )


# ----------------------------------------------------------------------------- slo


def slo_result(connection: Any, run_id: str) -> dg.AssetCheckResult:
    """Every (trial, phase, pipeline)'s SLO verdict from the `slo_verdicts` view; fails (WARN)
    when any is missed. A run without an SLO passes and says so."""
    rows = connection.execute(sql_file("slo_verdicts.sql"), {"run": run_id}).fetchall()
    lines: dict[str, list[str]] = {verdict: [] for verdict in ("missed", "undecided", "met")}
    for trial, phase, pipeline, slo_ms, percentile, queries, over_slo, verdict in rows:
        lines.setdefault(verdict, []).append(
            f"trial {trial} {phase} {pipeline}: {verdict} ({over_slo} of {queries} queries "
            f"over {slo_ms:g} ms, p{percentile * 100:g})"
        )
    missed, undecided = lines["missed"], lines["undecided"]
    if not rows:
        description = "no pipeline of this run has an SLO"
    elif missed:
        description = f"{len(missed)} SLO(s) missed: {missed[0]}"
    elif undecided:
        description = f"none missed; {len(undecided)} undecided (too few queries to tell)"
    else:
        description = "every SLO met"
    return dg.AssetCheckResult(
        check_name=SLO,
        passed=not missed,
        severity=dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "run_id": run_id,
            **{verdict: len(found) for verdict, found in lines.items()},
            "verdicts": markdown_lines([line for found in lines.values() for line in found]),
        },
    )
