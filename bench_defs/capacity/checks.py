"""The `capacity` asset's checks and metadata, computed from a search's capacity.json.

- `capacity_bracket_within_precision`: the bracket [lo, hi] (the certified rate and the lowest
  rate proven missed above it) is within the search's precision (hi / lo <= 1 + precision).
  Otherwise the stop reason says why, with capacity.json's `stop_detail` when it has one:
  `infeasible` (the SLO is missed even without queueing: no rate meets it) and `ceiling` (met up
  to the measured ceiling) pass, having answered the question; `converged` passes when the
  lowest rate not met is within the precision (the rate above lo was merely not proven missed,
  so the proven bracket is wider); `max_probes`, `budget` and `undecidable` fail with severity
  WARN: the question was not answered to the precision (a larger budget, or a coarser
  precision, answers it); any other wide bracket is an ERROR.
- `capacity_probes_monotone`: at most one pair of probes out of monotone order (a met rate
  above a missed one, `monotonicity_violations`); more means the verdicts are noisier than the
  bracket assumes (probe window too short, or interference that varies between probes).

Both are evaluated in the asset's own step (the result is at hand there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.core.image_metadata import image_markdown
from stages.contracts.capacity_files import CAPACITY_FILE, CapacityResult

BRACKET_CHECK = "capacity_bracket_within_precision"
MONOTONE_CHECK = "capacity_probes_monotone"
MAX_MONOTONICITY_VIOLATIONS = 1
DEFAULT_PRECISION = 0.05
_TOLERANCE = 1e-12

UNANSWERED = ("max_probes", "budget", "undecidable")
"""Stop reasons that leave the question open: a wide bracket is a WARN, not an ERROR."""
_MEANING = {
    "infeasible": "the SLO is missed even without queueing (the unloaded probe missed it, or "
    "the ceiling probe completed nothing), so no rate meets it",
    "undecidable": "nothing met down to the lowest rate the time budget decides the percentile at",
    "budget": "the time budget ran out with the bracket wider than the precision",
    "max_probes": "the probe budget ran out with the bracket wider than the precision",
}
"""What a stop reason means, said when capacity.json has no stop_detail (an older search)."""


def capacity_check_specs(asset: Any) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            BRACKET_CHECK,
            asset=asset,
            description="hi / lo <= 1 + precision, or the stop reason says why there is no "
            "closed bracket (infeasible, ceiling, converged on a rate not proven missed: "
            "pass; max_probes, budget, undecidable: WARN).",
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


def _evidence(result: CapacityResult) -> str | None:
    """Why the search stopped: capacity.json's stop_detail, else what the reason means."""
    return result.stop_detail or _MEANING.get(result.stop_reason)


def lowest_not_met(result: CapacityResult) -> float | None:
    """The lowest search rate above the certified one that was not met: where a converged
    search stopped (bracket hi, the lowest rate proven missed, may lie above it)."""
    lo = result.bracket[0]
    rates = [
        probe.rate
        for probe in result.probes
        if probe.kind == "search" and probe.verdict != "met" and probe.rate > lo
    ]
    return min(rates, default=None)


def _open_bracket(result: CapacityResult, precision: float) -> str | None:
    """Why a search that answered its question has no bracket within the precision (the
    check passes, saying so); None when it did not answer it."""
    lo = result.bracket[0]
    if result.stop_reason == "infeasible":
        return f"infeasible: {_evidence(result)}; no bracket"
    if result.stop_reason == "ceiling":
        return (
            f"ceiling: met the SLO up to the measured ceiling "
            f"({result.ceiling_qps or lo:.4g} q/s); nothing above it can be "
            "offered, so the bracket stays open"
        )
    stopped = lowest_not_met(result)
    if result.stop_reason != "converged" or stopped is None or lo <= 0:
        return None
    if stopped / lo > 1 + precision + _TOLERANCE:
        return None
    hi = result.bracket[1]
    proven = (
        "no rate above it was proven missed"
        if hi is None
        else f"the lowest rate proven missed is {hi:.4g} (hi/lo = {hi / lo:.4g})"
    )
    return (
        f"converged: the lowest rate not met ({stopped:.4g}) is within 1 + {precision:g} of "
        f"lo ({lo:.4g}), but was not proven missed; {proven}"
    )


def bracket_check(result: CapacityResult, precision: float) -> dg.AssetCheckResult:
    """`capacity_bracket_within_precision` of one search (see the module docstring)."""
    ratio = _ratio(result.bracket)
    metadata = {
        "stop_reason": result.stop_reason,
        "stop_detail": result.stop_detail or dg.MetadataValue.null(),
        "precision": precision,
        "hi_over_lo": ratio if ratio is not None else dg.MetadataValue.null(),
    }
    if ratio is not None and ratio <= 1 + precision + _TOLERANCE:
        return dg.AssetCheckResult(
            check_name=BRACKET_CHECK,
            passed=True,
            metadata=metadata,
            description=f"hi/lo = {ratio:.4g} <= 1 + {precision:g}",
        )
    answered = _open_bracket(result, precision)
    if answered is not None:
        return dg.AssetCheckResult(
            check_name=BRACKET_CHECK, passed=True, metadata=metadata, description=answered
        )
    shown = "open (no missed rate)" if ratio is None else f"{ratio:.4g}"
    evidence = _evidence(result)
    severity = (
        dg.AssetCheckSeverity.WARN
        if result.stop_reason in UNANSWERED
        else dg.AssetCheckSeverity.ERROR
    )
    return dg.AssetCheckResult(
        check_name=BRACKET_CHECK,
        passed=False,
        severity=severity,
        metadata=metadata,
        description=f"{result.stop_reason} after {len(result.probes)} probes with hi/lo "
        f"{shown} > 1 + {precision:g}" + (f": {evidence}" if evidence else ""),
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
    """One row per probe: kind, rate, planned window, seed, queries, over-SLO, verdict (and
    whether it was flagged or could not pass), p99 and abort reason."""
    lines = [
        "| # | kind | rate | window s | seed | queries | over SLO | verdict | p99 ms | abort |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for probe in result.probes:
        p99 = "-" if probe.p99_ms is None else f"{probe.p99_ms:.4g}"
        window = "-" if probe.window_s is None else f"{probe.window_s:.4g}"
        verdict = (probe.verdict or "-") + (" (flagged)" if probe.flagged else "")
        verdict += " (cannot pass)" if probe.cannot_pass else ""
        lines.append(
            f"| {probe.index} | {probe.kind} | {probe.rate:.4g} | {window} | {probe.seed} "
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
        "stop_detail": result.stop_detail or dg.MetadataValue.null(),
        "spent_s": _optional_float(result.spent_s),
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
