"""PNG plots of a capacity search and a capacity region, drawn headless (matplotlib's Agg
backend) from the search's records (analysis.capacity.file_reader) or the region's rows
(analysis.capacity.table_rows).

The search plot answers "where does the SLO break": each search probe's p99 against its offered
rate (log x), coloured by verdict (judged at the searched percentile, which the SLO line names),
the SLO line, the bracket shaded, the certified rate and the estimate with its interval marked.
The unloaded probe has no rate (one query at a time): it is a horizontal line at its p99, the
latency floor no rate gets under.
The region plot puts each ray's certified and estimated point on normalised axes (rate / solo
capacity) beside the line x + y = 1 that pure time sharing gives and the box that no
interference at all would give.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers, CI or inside Dagster

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from analysis.reports.plots import DPI

if TYPE_CHECKING:
    from analysis.capacity.file_reader import SearchFiles
    from stages.contracts.capacity_files import CapacityResult, ProbeRecord

VERDICT_COLOUR = {"met": "#2ca02c", "missed": "#d62728", "undecided": "#ff7f0e"}
NO_VERDICT_COLOUR = "#7f7f7f"


def _save(figure: Any, path: Path) -> Path:
    figure.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return path


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _draw_probes(axis: Axes, probes: Sequence[ProbeRecord], top_ms: float) -> None:
    """One marker per search probe at (rate, p99), coloured by verdict; a p99 that is infinite
    or missing (failures counted as +inf) sits on the top edge as a triangle; an aborted probe
    is a cross (labelled `cannot pass` when the count rule stopped it unproven), a flagged one
    is ringed. The ceiling and unloaded probes (rate 0, closed loop) are not search probes."""
    labelled: set[str] = set()
    for probe in probes:
        rate = _finite(probe.rate)
        if probe.kind != "search" or rate is None or rate <= 0:
            continue
        verdict = probe.verdict or "no verdict"
        p99 = _finite(probe.p99_ms)
        aborted = probe.abort_reason is not None
        marker = "x" if aborted else ("o" if p99 is not None else "^")
        stopped = " (cannot pass)" if probe.cannot_pass else " (aborted)"
        label = f"{verdict}{stopped if aborted else ''}"
        axis.scatter(
            [rate],
            [p99 if p99 is not None else top_ms],
            marker=marker,
            s=50,
            color=VERDICT_COLOUR.get(verdict, NO_VERDICT_COLOUR),
            label=None if label in labelled else label,
            zorder=3,
        )
        labelled.add(label)
        if probe.flagged:
            axis.scatter(
                [rate],
                [p99 if p99 is not None else top_ms],
                s=160,
                facecolors="none",
                edgecolors="black",
                label=None if "flagged" in labelled else "flagged (undecided twice)",
                zorder=2,
            )
            labelled.add("flagged")


def _draw_unloaded(axis: Axes, probes: Sequence[ProbeRecord]) -> None:
    """The unloaded probe (no rate: one query at a time) as a dashed horizontal line at its
    p99, coloured by its verdict; left out when it has no finite p99."""
    for probe in probes:
        p99 = _finite(probe.p99_ms)
        if probe.kind != "unloaded" or p99 is None or p99 <= 0:
            continue
        verdict = probe.verdict or "no verdict"
        axis.axhline(
            p99,
            color=VERDICT_COLOUR.get(verdict, NO_VERDICT_COLOUR),
            linestyle=(0, (6, 3)),
            linewidth=1.2,
            label=f"unloaded p99 ({verdict})",
            zorder=1,
        )


def _mark_answer(axis: Axes, result: CapacityResult | None, slo_ms: float) -> None:
    """The bracket shaded, the certified rate as a line, the estimate as a point on the SLO
    line with its 95% interval as a horizontal bar, the ceiling as a dotted line (nothing
    while the search runs)."""
    if result is None:
        return
    low, high = _finite(result.bracket[0]), _finite(result.bracket[1])
    if low is not None and high is not None:
        axis.axvspan(low, high, color="#c6dbef", alpha=0.6, label="bracket", zorder=0)
    certified = _finite(result.certified_qps)
    if certified is not None:
        axis.axvline(certified, color="#2ca02c", linewidth=1.5, label="certified", zorder=1)
    estimate = _finite(result.estimate_qps)
    if estimate is not None:
        interval = result.estimate_ci95 or (None, None)
        ci_low, ci_high = _finite(interval[0]), _finite(interval[1])
        errors = (
            [[estimate - ci_low], [ci_high - estimate]]
            if ci_low is not None and ci_high is not None
            else None
        )
        axis.errorbar(
            [estimate],
            [slo_ms],
            xerr=errors,
            fmt="D",
            color="#1f77b4",
            capsize=4,
            label="estimate [95% interval]",
            zorder=4,
        )
    ceiling = _finite(result.ceiling_qps)
    if ceiling is not None and ceiling > 0:
        axis.axvline(ceiling, color="#7f7f7f", linestyle=":", label="ceiling", zorder=1)


def plot_search(files: SearchFiles, path: Path) -> Path:
    """p99 against offered rate (log x, log y) for one search, written to `path`."""
    slo_ms = files.slo_ms
    percentile = files.percentile
    finite = [value for probe in files.probes if (value := _finite(probe.p99_ms))]
    top_ms = max([slo_ms * 4, *(value * 1.5 for value in finite)])
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    _draw_probes(axis, files.probes, top_ms)
    _draw_unloaded(axis, files.probes)
    _mark_answer(axis, files.result, slo_ms)
    slo_label = f"SLO: p{100 * percentile:g} <= {slo_ms:g} ms"
    axis.axhline(slo_ms, color="black", linestyle="--", linewidth=1, label=slo_label)
    axis.set_xscale("log")
    axis.set_yscale("log")
    rates = [rate for probe in files.probes if (rate := _finite(probe.rate)) and rate > 0]
    if rates:
        axis.set_xlim(min(rates) / 1.15, max(rates) * 1.15)
    bottom = min([slo_ms / 4, *(value / 1.5 for value in finite if value > 0)])
    axis.set_ylim(bottom, top_ms * 1.2)
    axis.set_xlabel("ray scale s" if files.is_ray else "offered rate (queries/s, log)")
    axis.set_ylabel("p99 latency (ms, log)")  # p99_ms whatever the searched percentile
    axis.set_title(f"Capacity of {files.pipeline}: {files.search_id}")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for ticks in (axis.xaxis, axis.yaxis):
        ticks.set_major_formatter(plain)
    axis.xaxis.set_minor_formatter(plain)
    axis.tick_params(axis="x", which="minor", labelsize="x-small")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(figure, path)


def _draw_ray(axis: Axes, point: Mapping[str, Any], labelled: set[str]) -> None:
    """One ray: a faint line from the origin, the certified point, the estimate with its
    interval drawn along the ray (the interval of s scales both coordinates)."""

    def label(text: str) -> str | None:
        if text in labelled:
            return None
        labelled.add(text)
        return text

    dx, dy = float(point["direction_a"]), float(point["direction_b"])
    reach = max(
        1.2, *(_finite(point.get(k)) or 0.0 for k in ("estimate_ci95_high_s", "certified_s"))
    )
    axis.plot([0, reach * dx], [0, reach * dy], color="#bdbdbd", linewidth=0.8, zorder=1)
    low, high = (
        _finite(point.get("estimate_ci95_low_s")),
        _finite(point.get("estimate_ci95_high_s")),
    )
    if low is not None and high is not None:
        axis.plot(
            [low * dx, high * dx],
            [low * dy, high * dy],
            color="#1f77b4",
            linewidth=4,
            alpha=0.5,
            label=label("estimate 95% interval"),
            zorder=2,
        )
    estimate = _finite(point.get("estimate_s"))
    if estimate is not None:
        axis.scatter(
            [estimate * dx],
            [estimate * dy],
            marker="D",
            color="#1f77b4",
            label=label("estimate"),
            zorder=3,
        )
    certified = _finite(point.get("certified_s"))
    if certified is not None:
        axis.scatter(
            [certified * dx],
            [certified * dy],
            marker="o",
            color="#2ca02c",
            label=label("certified"),
            zorder=4,
        )


def plot_region(
    points: Sequence[Mapping[str, Any]], pipelines: tuple[str, str], path: Path
) -> Path:
    """The capacity region on normalised axes (x = rate_A / C_A, y = rate_B / C_B): the
    time-sharing line x + y = 1, the no-interference box, each ray's points; to `path`."""
    figure, axis = plt.subplots(figsize=(5.5, 5.5))
    axis.plot(
        [0, 1], [1, 0], color="black", linestyle="--", linewidth=1, label="time sharing (x + y = 1)"
    )
    axis.add_patch(
        Rectangle(
            (0, 0),
            1,
            1,
            fill=False,
            edgecolor="#7f7f7f",
            linestyle=":",
            label="no interference (box)",
        )
    )
    labelled: set[str] = set()
    for point in points:
        _draw_ray(axis, point, labelled)
    boundary = sorted(
        (float(point["angle_deg"]), certified * float(point["direction_a"]),
         certified * float(point["direction_b"]))
        for point in points
        if (certified := _finite(point.get("certified_s"))) is not None
    )  # fmt: skip
    if len(boundary) > 1:
        axis.plot([x for _, x, _ in boundary], [y for _, _, y in boundary], color="#2ca02c",
                  linewidth=1, alpha=0.7, label="certified boundary", zorder=2)  # fmt: skip
    extent = max(
        [1.3]
        + [
            1.05 * (_finite(point.get(name)) or 0.0) * float(point[axis_name])
            for point in points
            for name in ("certified_s", "estimate_ci95_high_s")
            for axis_name in ("direction_a", "direction_b")
        ]
    )
    axis.set_xlim(-0.02, extent)
    axis.set_ylim(-0.02, extent)
    axis.set_aspect("equal")
    first, second = pipelines
    axis.set_xlabel(f"{first}: rate / solo capacity")
    axis.set_ylabel(f"{second}: rate / solo capacity")
    axis.set_title(f"Capacity region of {first} and {second}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small", loc="upper right")
    return _save(figure, path)
