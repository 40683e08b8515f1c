"""Asset checks of a loaded benchmark run (on the `warehouse` asset, evaluated in its step).

- `validity`: the run can be trusted: no failed pipeline, every phase measured at least its
  `min_queries` (and at least one), telemetry without gaps longer than 3 sampling periods in
  any load window, no foreign compute process on the GPU, and no harness start-up work (the
  environment probe) overlapping a load window.
- `regression`: throughput or latency worse than the previous materialisation of the same
  partition, decided by `analysis.compare` (ratio intervals, not a bare threshold).
- `reproducibility`: a rerun of the same spec hash and seeds issued the same arrival schedule
  (offsets from each phase's first arrival, per query id) and its metrics agree within their
  intervals (no headline comparison is 'faster' or 'slower'; one without an interval, such as
  the p99 of too few queries, cannot disagree).
- `slo`: each pipeline's verdict on its SLO (the `slo_verdicts` view): a warning when any is
  `missed`; `undecided` ones (too few queries to tell) are listed as such, not failed.

Each function takes a read-only DuckDB connection and returns an AssetCheckResult; a check with
nothing to compare with (first run, another spec) passes and says so.
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
            description="Throughput or p50/p99 worse than the previous materialisation of "
            "this partition (analysis.compare: ratio interval entirely on the bad side).",
        ),
        dg.AssetCheckSpec(
            REPRODUCIBILITY,
            asset=asset,
            description="A rerun of the same spec hash and seeds: same arrival schedule, "
            "metrics within their intervals.",
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


def _markdown(lines: list[str]) -> dg.MetadataValue:
    return dg.MetadataValue.md("\n".join(f"- {line}" for line in lines) or "none")


# ----------------------------------------------------------------------------- validity


def _sql(name: str) -> str:
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
        _sql("telemetry_gaps.sql"),
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
        metadata={"run_id": run_id, "problems": _markdown(problems)},
    )


# ----------------------------------------------------------------------------- slo


def slo_result(connection: Any, run_id: str) -> dg.AssetCheckResult:
    """Every (trial, phase, pipeline)'s SLO verdict from the `slo_verdicts` view; fails (WARN)
    when any is missed. A run without an SLO passes and says so."""
    rows = connection.execute(_sql("slo_verdicts.sql"), {"run": run_id}).fetchall()
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
            "verdicts": _markdown([line for found in lines.values() for line in found]),
        },
    )


# ----------------------------------------------------------------------------- comparisons


def _comparison(connection: Any, previous: str, current: str) -> Any:
    from analysis.compare import compare_connection

    return compare_connection(connection, previous, current)


def _rows_markdown(frame: Any) -> dg.MetadataValue:
    from analysis.compare import COMPARISON_MARKDOWN
    from analysis.report_file import markdown_table

    if frame.empty:
        return dg.MetadataValue.md("none")
    return dg.MetadataValue.md(markdown_table(frame, COMPARISON_MARKDOWN))


def _not_comparable(
    name: str, connection: Any, previous: str | None, current: str
) -> dg.AssetCheckResult | None:
    """A passing result saying why there is nothing to compare, or None when there is."""
    if previous is None or previous == current:
        reason = "no previous materialisation of this partition"
    else:
        a, b = loaded_run(connection, previous), loaded_run(connection, current)
        if a is None or b is None:
            reason = f"run {previous if a is None else current} is not in the warehouse"
        elif a.spec_hash != b.spec_hash:
            reason = (
                f"the previous run {previous} used another spec (hash {str(a.spec_hash)[:12]}, "
                f"now {str(b.spec_hash)[:12]}): not comparable"
            )
        else:
            return None
    return dg.AssetCheckResult(
        check_name=name, passed=True, description=reason, metadata={"compared_with": "none"}
    )


def comparison_results(
    connection: Any, previous: str | None, current: str
) -> list[dg.AssetCheckResult]:
    """`regression` and `reproducibility`, both read from one comparison of the two runs."""
    comparable = _not_comparable(REGRESSION, connection, previous, current) is None
    comparison = None
    if comparable and previous is not None:
        comparison = _comparison(connection, previous, current)
    return [
        regression_result(connection, previous, current, comparison),
        reproducibility_result(connection, previous, current, comparison),
    ]


def regression_result(
    connection: Any, previous: str | None, current: str, comparison: Any = None
) -> dg.AssetCheckResult:
    """Fails when `analysis.compare.regressions` finds a headline row 'slower'; `comparison`
    is `compare`'s frame of the two runs when the caller has it already."""
    from analysis.compare import regressions

    skipped = _not_comparable(REGRESSION, connection, previous, current)
    if skipped is not None:
        return skipped
    assert previous is not None
    if comparison is None:
        comparison = _comparison(connection, previous, current)
    found = regressions(comparison)
    return dg.AssetCheckResult(
        check_name=REGRESSION,
        passed=found.empty,
        severity=dg.AssetCheckSeverity.WARN,
        description="no regression" if found.empty else f"{len(found)} figure(s) got worse",
        metadata={"compared_with": previous, "regressions": _rows_markdown(found)},
    )


def reproducibility_problems(
    connection: Any, previous: str, current: str, comparison: Any = None
) -> list[str]:
    """Why `current` does not reproduce `previous` (same spec hash assumed); empty: it does."""
    a, b = loaded_run(connection, previous), loaded_run(connection, current)
    assert a is not None and b is not None
    problems = []
    if a.manifest.seeds != b.manifest.seeds:
        problems.append("the seeds differ")
    row = connection.execute(
        _sql("schedule_agreement.sql"),
        {"a": previous, "b": current, "tolerance": SCHEDULE_TOLERANCE_NS},
    ).fetchone()
    arrivals, differing = (int(row[0]), int(row[1])) if row else (0, 0)
    if differing:
        problems.append(f"{differing} of {arrivals} scheduled arrivals differ from {previous}")
    if comparison is None:
        comparison = _comparison(connection, previous, current)
    if not comparison.empty:
        over_trials = comparison["trial"].isna()
        headline = comparison[over_trials] if over_trials.any() else comparison
        # 'faster' or 'slower' is a disagreement; no verdict (no interval, e.g. a p99 of
        # too few queries) cannot be one.
        changed = headline[headline["verdict"].isin(["faster", "slower"])]
        for _, row_ in changed.iterrows():
            problems.append(
                f"trial {row_['trial'] if row_['trial'] == row_['trial'] else 'all'} "
                f"{row_['phase']} {row_['pipeline']} {row_['metric']}: {row_['verdict']} "
                f"(ratio {row_['ratio']:.3g} [{row_['ratio_ci_low']:.3g}, "
                f"{row_['ratio_ci_high']:.3g}])"
            )
    return problems


def reproducibility_result(
    connection: Any, previous: str | None, current: str, comparison: Any = None
) -> dg.AssetCheckResult:
    skipped = _not_comparable(REPRODUCIBILITY, connection, previous, current)
    if skipped is not None:
        return skipped
    assert previous is not None
    problems = reproducibility_problems(connection, previous, current, comparison)
    return dg.AssetCheckResult(
        check_name=REPRODUCIBILITY,
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="reproduced" if not problems else problems[0],
        metadata={"compared_with": previous, "problems": _markdown(problems)},
    )
