"""A capacity search's and a capacity region's report.md, written into its directory with the
plot beside it (analysis.capacity.figures): the headline (certified capacity, estimate with its
95% interval, bracket, stop reason with its evidence, time spent), the probe or ray table, and
the image link. Read from the directory's JSON alone, so a report needs no warehouse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.capacity import figures
from analysis.capacity.file_reader import RegionFiles, SearchFiles, read_region, read_search
from analysis.capacity.table_rows import ray_row, search_row
from analysis.reports.report_entries import MARKDOWN_NUMBERS
from stages.contracts.capacity_files import ProbeRecord

REPORT_NAME = "report.md"
SEARCH_PLOT = "capacity_plot.png"
REGION_PLOT = "region_plot.png"


def _cell(value: Any) -> str:
    return MARKDOWN_NUMBERS(float(value) if isinstance(value, int | float) else value)


def _with_interval(value: Any, low: Any, high: Any) -> str:
    if low is None or high is None:
        return _cell(value)
    return f"{_cell(value)} [{_cell(low)}, {_cell(high)}]"


def _stop_reason(row: Mapping[str, Any]) -> str:
    """The stop reason and, when the search recorded it, the evidence behind it."""
    reason = str(row["stop_reason"] or "unfinished")
    return f"{reason}: {row['stop_detail']}" if row["stop_detail"] else reason


def _spent(row: Mapping[str, Any]) -> str:
    """The probes' wall time in minutes, and of what budget ('-' before capacity II)."""
    if row["spent_s"] is None:
        return "-"
    budget = f" of a {row['budget_s'] / 60:g} min budget" if row["budget_s"] else ""
    return f"{row['spent_s'] / 60:.1f} min{budget}"


def search_summary(files: SearchFiles) -> list[tuple[str, str]]:
    """(label, text) lines of a search's headline: the answer, how it stopped, the probes."""
    row = search_row(files)
    unit = "s (ray scale)" if files.is_ray else "q/s"
    co_runners = ", ".join(f"{name} at {rate:g} q/s" for name, rate in files.with_rates.items())
    bracket = (
        f"[{_cell(row['bracket_lo'])}, {_cell(row['bracket_hi'])}]"
        if row["bracket_lo"] is not None
        else "-"
    )
    return [
        ("pipeline", row["pipeline"]),
        ("SLO", f"p{100 * row['percentile']:g} <= {row['slo_ms']:g} ms"),
        ("with", co_runners or "nothing (alone)"),
        (f"certified ({unit})", _cell(row["certified_qps"])),
        (
            f"estimate [95% interval] ({unit})",
            _with_interval(
                row["estimate_qps"], row["estimate_ci95_low"], row["estimate_ci95_high"]
            ),
        ),
        ("bracket", bracket),
        ("stop reason", _stop_reason(row)),
        ("spent", _spent(row)),
        ("probes", str(row["probes"])),
        ("flagged probes", _cell(row["flagged_probes"])),
        ("monotonicity violations", _cell(row["monotonicity_violations"])),
        ("ceiling (q/s)", _cell(row["ceiling_qps"])),
    ]


_PROBE_COLUMNS = (
    ("#", "index"),
    ("kind", "kind"),
    ("rate", "rate"),
    ("window s", "window_s"),
    ("seed", "seed"),
    ("queries", "queries"),
    ("over SLO", "over_slo"),
    ("verdict", "verdict"),
    ("p99 ms", "p99_ms"),
    ("flagged", "flagged"),
    ("aborted", "abort_reason"),
    ("run", "run_dir"),
)


def probe_table(probes: Sequence[ProbeRecord]) -> str:
    """The probes as a Markdown table, in the order they ran (run directories by name)."""
    lines = [
        "| " + " | ".join(header for header, _ in _PROBE_COLUMNS) + " |",
        "|" + "---|" * len(_PROBE_COLUMNS),
    ]
    for probe in sorted(probes, key=lambda item: item.index):
        cells = []
        for _, name in _PROBE_COLUMNS:
            value = getattr(probe, name)
            if name == "run_dir" and value:
                value = Path(str(value)).name
            if name == "flagged":
                value = "yes" if value else ""
            if name == "verdict" and probe.cannot_pass:
                value = f"{value} (cannot pass)"
            cells.append(_cell(value).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_search_report(search_dir: Path | str) -> Path:
    """Write report.md and capacity_plot.png (p99 against offered rate) into the search
    directory; returns report.md's path."""
    files = read_search(search_dir)
    plot = figures.plot_search(files, files.search_dir / SEARCH_PLOT)
    summary = "\n".join(f"- **{label}**: {text}" for label, text in search_summary(files))
    text = (
        f"# Capacity search `{files.search_id}`\n\n{summary}\n\n"
        f"![p99 against offered rate]({plot.name})\n\n"
        f"## Probes\n\n{probe_table(files.probes)}\n"
    )
    report = files.search_dir / REPORT_NAME
    report.write_text(text, encoding="utf-8")
    return report


_RAY_COLUMNS = (
    ("angle", "angle_deg"),
    ("certified s", "certified_s"),
    ("certified (x, y)", "certified_xy"),
    ("x + y", "certified_sum"),
    ("estimate s [95%]", "estimate"),
    ("estimate x + y", "estimate_sum"),
    ("stop reason", "stop_reason"),
    ("search", "search_id"),
)


def region_points(files: RegionFiles) -> list[dict[str, Any]]:
    """Each ray's row with its normalised points (what the capacity_region view computes)."""
    points = []
    for ray in files.rays:
        row = ray_row(files, ray)
        weight = row["direction_a"] + row["direction_b"]
        for name in ("certified_s", "estimate_s", "estimate_ci95_low_s", "estimate_ci95_high_s"):
            value = row[name]
            stem = name.removesuffix("_s")
            row[f"{stem}_x"] = None if value is None else value * row["direction_a"]
            row[f"{stem}_y"] = None if value is None else value * row["direction_b"]
            row[f"{stem}_sum"] = None if value is None else value * weight
        points.append(row)
    return points


def _ray_cells(point: Mapping[str, Any]) -> list[str]:
    certified = (
        f"({_cell(point['certified_x'])}, {_cell(point['certified_y'])})"
        if point["certified_s"] is not None
        else "-"
    )
    estimate = _with_interval(
        point["estimate_s"], point["estimate_ci95_low_s"], point["estimate_ci95_high_s"]
    )
    values = {**point, "certified_xy": certified, "estimate": estimate}
    return [
        str(values[name]) if name in ("certified_xy", "estimate") else _cell(values[name])
        for _, name in _RAY_COLUMNS
    ]


def write_region_report(region_dir: Path | str) -> Path:
    """Write report.md and region_plot.png (the region on normalised axes) into the region
    directory; returns report.md's path."""
    files = read_region(region_dir)
    points = region_points(files)
    first, second = files.pipelines() if files.rays else ("A", "B")
    plot = figures.plot_region(points, (first, second), files.region_dir / REGION_PLOT)
    lines = [
        "| " + " | ".join(header for header, _ in _RAY_COLUMNS) + " |",
        "|" + "---|" * len(_RAY_COLUMNS),
        *("| " + " | ".join(_ray_cells(point)) + " |" for point in points),
    ]
    solo = [
        f"- **{name}** alone: {_cell(points[0][key]) if points else '-'} q/s"
        for name, key in ((first, "solo_capacity_a_qps"), (second, "solo_capacity_b_qps"))
    ]
    text = (
        f"# Capacity region `{files.region_id}`: {first} and {second}\n\n"
        + "\n".join(solo)
        + "\n\nx = rate of "
        f"{first} / its solo capacity, y = rate of {second} / its solo capacity; "
        "x + y = 1 is what pure time sharing of the device gives.\n\n"
        f"![capacity region]({plot.name})\n\n## Rays\n\n" + "\n".join(lines) + "\n"
    )
    report = files.region_dir / REPORT_NAME
    report.write_text(text, encoding="utf-8")
    return report
