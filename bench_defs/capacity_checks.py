"""The `capacity` asset's checks and metadata, computed from a search's capacity.json.

- `capacity_bracket_within_precision`: the bracket [lo, hi] is within the search's precision
  (hi / lo <= 1 + precision). A search that stopped for a reason that leaves no closed bracket
  says why and passes (`infeasible`: even the lowest rate missed; `ceiling`: the pipeline met
  the SLO up to its measured ceiling); one that ran out of probes (`max_probes`) with a wider
  bracket fails with severity WARN (a longer budget or a coarser precision closes it).
- `capacity_probes_monotone`: at most one pair of probes out of monotone order (a met rate
  above a missed one, `monotonicity_violations`); more means the verdicts are noisier than the
  bracket assumes (probe window too short, or interference that varies between probes).

Both are evaluated in the asset's own step (the result is at hand there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.reports import image_markdown
from stages.contracts.capacity_files import CAPACITY_FILE, CapacityResult

BRACKET_CHECK = "capacity_bracket_within_precision"
MONOTONE_CHECK = "capacity_probes_monotone"
MAX_MONOTONICITY_VIOLATIONS = 1
DEFAULT_PRECISION = 0.05


def capacity_check_specs(asset: Any) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            BRACKET_CHECK,
            asset=asset,
            description="hi / lo <= 1 + precision, or the stop reason says why there is no "
            "closed bracket (infeasible, ceiling: pass; max_probes: WARN).",
        ),
        dg.AssetCheckSpec(
            MONOTONE_CHECK,
            asset=asset,
            description="At most one pair of probes out of monotone order (a met rate above a "
            "missed one).",
        ),
    ]


def _ratio(bracket: tuple[float, float | None]) -> float | None:
    lo, hi = bracket
    if hi is None or lo <= 0:
        return None
    return hi / lo


def bracket_check(result: CapacityResult, precision: float) -> dg.AssetCheckResult:
    """`capacity_bracket_within_precision` of one search (see the module docstring)."""
    ratio = _ratio(result.bracket)
    metadata = {
        "stop_reason": result.stop_reason,
        "precision": precision,
        "hi_over_lo": ratio if ratio is not None else dg.MetadataValue.null(),
    }
    within = ratio is not None and ratio <= 1 + precision + 1e-12
    if within:
        return dg.AssetCheckResult(
            check_name=BRACKET_CHECK,
            passed=True,
            metadata=metadata,
            description=f"hi/lo = {ratio:.4g} <= 1 + {precision:g}",
        )
    if result.stop_reason == "infeasible":
        description = "infeasible: even the lowest rate probed missed the SLO; no bracket"
        return dg.AssetCheckResult(
            check_name=BRACKET_CHECK, passed=True, metadata=metadata, description=description
        )
    if result.stop_reason == "ceiling":
        description = (
            f"ceiling: met the SLO up to the measured ceiling "
            f"({result.ceiling_qps or result.bracket[0]:.4g} q/s); nothing above it can be "
            "offered, so the bracket stays open"
        )
        return dg.AssetCheckResult(
            check_name=BRACKET_CHECK, passed=True, metadata=metadata, description=description
        )
    shown = "open (no missed rate)" if ratio is None else f"{ratio:.4g}"
    severity = (
        dg.AssetCheckSeverity.WARN
        if result.stop_reason == "max_probes"
        else dg.AssetCheckSeverity.ERROR
    )
    return dg.AssetCheckResult(
        check_name=BRACKET_CHECK,
        passed=False,
        severity=severity,
        metadata=metadata,
        description=f"{result.stop_reason} after {len(result.probes)} probes with hi/lo "
        f"{shown} > 1 + {precision:g}",
    )


def monotone_check(result: CapacityResult) -> dg.AssetCheckResult:
    """`capacity_probes_monotone` of one search (see the module docstring)."""
    violations = result.monotonicity_violations
    return dg.AssetCheckResult(
        check_name=MONOTONE_CHECK,
        passed=violations <= MAX_MONOTONICITY_VIOLATIONS,
        metadata={"monotonicity_violations": violations, "flagged_probes": result.flagged_probes},
        description=f"{violations} pair(s) of probes out of monotone order "
        f"(at most {MAX_MONOTONICITY_VIOLATIONS} allowed)",
    )


def _optional_float(value: float | None) -> Any:
    return dg.MetadataValue.float(value) if value is not None else dg.MetadataValue.null()


def probes_markdown(result: CapacityResult) -> str:
    """One row per probe: kind, rate, seed, queries, over-SLO, verdict, p99 and abort reason."""
    lines = [
        "| # | kind | rate | seed | queries | over SLO | verdict | p99 ms | abort |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for probe in result.probes:
        p99 = "-" if probe.p99_ms is None else f"{probe.p99_ms:.4g}"
        verdict = (probe.verdict or "-") + (" (flagged)" if probe.flagged else "")
        lines.append(
            f"| {probe.index} | {probe.kind} | {probe.rate:.4g} | {probe.seed} "
            f"| {probe.queries} | {probe.over_slo} | {verdict} | {p99} "
            f"| {probe.abort_reason or ''} |"
        )
    return "\n".join(lines)


def result_metadata(result: CapacityResult, search_dir: Path) -> dict[str, Any]:
    """The materialisation's metadata: the answer, the bracket, the probes and the files."""
    ci = result.estimate_ci95
    metadata: dict[str, Any] = {
        "search_id": result.search_id,
        "pipeline": result.pipeline,
        "certified_qps": _optional_float(result.certified_qps),
        "estimate_qps": _optional_float(result.estimate_qps),
        "estimate_ci95": dg.MetadataValue.json(list(ci)) if ci else dg.MetadataValue.null(),
        "bracket": dg.MetadataValue.json(list(result.bracket)),
        "stop_reason": result.stop_reason,
        "probes": len(result.probes),
        "slo_ms": result.slo_ms,
        "percentile": result.percentile,
        "with": dg.MetadataValue.json(result.with_rates),
        "monotonicity_violations": result.monotonicity_violations,
        "flagged_probes": result.flagged_probes,
        "probes_table": dg.MetadataValue.md(probes_markdown(result)),
        "search_dir": dg.MetadataValue.path(str(search_dir)),
        "capacity_json": dg.MetadataValue.path(str(search_dir / CAPACITY_FILE)),
    }
    report = search_dir / "report.md"
    if report.is_file():
        metadata["report"] = dg.MetadataValue.path(str(report))
    plots = sorted(search_dir.glob("*.png"))
    if plots:
        metadata["plot_path"] = dg.MetadataValue.path(str(plots[0]))
        metadata["plot"] = dg.MetadataValue.md(image_markdown(plots[0], "p99 against offered rate"))
    return metadata
