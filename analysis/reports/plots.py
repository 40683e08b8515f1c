"""PNG plots of one run, drawn headless (matplotlib's Agg backend) from the warehouse.

Each `plot_*` function reads its data over a read-only connection (the SQL lives in
`analysis/sql/report/*.sql` or is a view), draws one figure and writes it to a PNG; it returns
the path, or None when the run has nothing to draw (no collocated phase: no contention heatmap).
The figures are the ones a reader wants first: how latency is distributed (CDF), what happened
over time (throughput, power and CPU on one time axis with the load windows marked), where a
query's time goes per stage, and what collocation cost each pipeline (with intervals: drawn by
analysis.reports.contention_plot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import matplotlib

matplotlib.use("Agg")  # headless: no display on servers, CI or inside Dagster

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analysis.reports.server_plot import PANELS as SERVER_PANELS
from analysis.reports.server_plot import draw_server_panels, server_timeline
from analysis.warehouse.sql_files import sql_text

DPI = 110
PHASE_STYLE = {"solo": "--", "collocated": "-", "collocated:": "-."}
WINDOW_COLOUR = {"solo": "#9ecae1", "collocated": "#fdae6b", "collocated:": "#fdd0a2"}


def phase_kind(phase: str) -> str:
    """The key of PHASE_STYLE / WINDOW_COLOUR for a phase: a subset phase `collocated:a+b`
    (collocation.subsets) shares 'collocated:'; 'solo' and 'collocated' are their own."""
    return "collocated:" if phase.startswith("collocated:") else phase


# Aim for about this many points per CDF curve and bins per timeline (thinned in SQL).
CDF_POINTS = 2000
TIMELINE_BINS = 200


@dataclass(frozen=True)
class Timebase:
    """The run's time axis: seconds from origin_ns (its first recorded instant)."""

    origin_ns: int
    span_s: float

    @property
    def bin_s(self) -> float:
        """Throughput bin width: about TIMELINE_BINS bins over the run, 0.1 s at least,
        rounded to a readable 1, 2 or 5 times a power of ten."""
        raw = max(self.span_s / TIMELINE_BINS, 0.1)
        power = 10 ** math.floor(math.log10(raw))
        return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def _frame(connection: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pd.DataFrame:
    return connection.execute(sql_text(f"report/{name}.sql"), params).df()


def timebase(connection: duckdb.DuckDBPyConnection, run_id: str) -> Timebase:
    """The run's first instant and span; LookupError when it recorded nothing."""
    row = connection.execute(sql_text("report/run_origin.sql"), {"run_id": run_id}).fetchone()
    if row is None or row[0] is None:
        raise LookupError(f"run {run_id!r} has no queries or samples to plot")
    return Timebase(origin_ns=int(row[0]), span_s=max((int(row[1]) - int(row[0])) / 1e9, 1e-3))


def gapped(t: pd.Series, y: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The series with a NaN inserted wherever consecutive times are more than three median
    steps apart, so a line breaks between samplers (two solo baselines share a phase) instead
    of drawing a straight segment across the pause."""
    times, values = t.to_numpy(dtype=float), y.to_numpy(dtype=float)
    if len(times) < 3:
        return times, values
    steps = np.diff(times)
    cut = np.flatnonzero(steps > 3 * float(np.median(steps))) + 1
    return np.insert(times, cut, np.nan), np.insert(values, cut, np.nan)


def save(figure: Any, path: Path) -> Path:
    """Write `figure` as a PNG at `path` and close it; returns the path."""
    figure.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return path


def _curve_label(trial: int, phase: str, trials: int) -> str:
    return f"{phase}, trial {trial}" if trials > 1 else phase


def plot_latency_cdf(connection: duckdb.DuckDBPyConnection, run_id: str, path: Path) -> Path | None:
    """One panel per pipeline, one curve per (phase, trial): the share of measured queries
    answered ok within x ms (log x). A curve ending below 1 lost that share of its queries
    (dropped, failed or timed out); the p50 and p99 (LoadGen's) are marked on each curve."""
    frame = _frame(connection, "latency_cdf", run_id=run_id, points=CDF_POINTS)
    if frame.empty:
        return None
    pipelines = sorted(frame["pipeline"].dropna().unique())
    trials = frame["trial"].nunique()
    figure, axes = plt.subplots(
        1, len(pipelines), figsize=(5.2 * len(pipelines), 3.8), squeeze=False
    )
    for axis, pipeline in zip(axes[0], pipelines, strict=True):
        for (phase, trial), curve in frame[frame["pipeline"] == pipeline].groupby(
            ["phase", "trial"], sort=True
        ):
            x, y = curve["latency_ms"].to_numpy(), curve["fraction"].to_numpy()
            lines = axis.step(
                x,
                y,
                where="post",
                linestyle=PHASE_STYLE.get(phase_kind(str(phase)), ":"),
                label=_curve_label(int(trial), str(phase), trials),
            )
            for p in (0.5, 0.99):
                # LoadGen's sorted[floor(N p)] (0-based) is the first rank with rank / N > p.
                reached = y > p
                if reached.any():
                    axis.plot(x[reached.argmax()], p, "o", color=lines[0].get_color(), ms=4)
        axis.set_xscale("log")
        # 1-2-5 ticks labelled as plain numbers: matplotlib's default labels one decade only
        # on a short span, or overlaps minor labels.
        axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_ylim(0, 1.02)
        axis.axhline(0.5, color="grey", lw=0.5)
        axis.axhline(0.99, color="grey", lw=0.5)
        axis.set_title(pipeline)
        axis.set_xlabel("latency from scheduled arrival (ms, log)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("share of measured queries done ok")
    figure.suptitle("Latency CDF (warm-up excluded; dots: p50 and p99)", fontsize=10)
    return save(figure, path)


def _mark_windows(axis: Axes, windows: pd.DataFrame, label: bool) -> None:
    for row in windows.itertuples():
        axis.axvspan(
            row.start_s,
            row.end_s,
            color=WINDOW_COLOUR.get(phase_kind(str(row.phase)), "#dddddd"),
            alpha=0.35,
        )
        if label:
            who = row.pipeline if isinstance(row.pipeline, str) else "all"
            phase = str(row.phase)
            # A subset phase's name already says who ran: "a+b" (the shade says collocated).
            text = phase.partition(":")[2] if phase_kind(phase) == "collocated:" else None
            axis.text(
                (row.start_s + row.end_s) / 2,
                1.0,
                text or f"{phase}: {who}",
                transform=axis.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def plot_timeline(connection: duckdb.DuckDBPyConnection, run_id: str, path: Path) -> Path | None:
    """Throughput (completions per bin), power (per device, source named) and CPU use, stacked
    on one time axis from the run's first instant, with each load window shaded (blue: a solo
    baseline, orange: the pipelines collocated); below them, when a service's metrics were
    scraped, the client's latency and the server's figures (analysis.reports.server_plot). Panels
    without data say so; None when the run recorded no query and no sample."""
    try:
        base = timebase(connection, run_id)
    except LookupError:
        return None  # a run cut short before its first query or sample: nothing to draw
    params = {"run_id": run_id, "origin_ns": base.origin_ns}
    windows = _frame(connection, "windows", **params)
    scrapes = server_timeline(connection, run_id, base.origin_ns)
    rows = 3 if scrapes.empty else 3 + SERVER_PANELS
    figure, axes = plt.subplots(rows, 1, figsize=(11, 2.5 * rows), sharex=True, squeeze=False)
    top, middle, bottom, *server = list(axes[:, 0])
    _throughput_panel(top, _frame(connection, "throughput_timeline", bin_s=base.bin_s, **params))
    top.set_ylabel(f"completed q/s\n({base.bin_s:g} s bins)")
    _power_panel(middle, _frame(connection, "power_timeline", **params))
    _cpu_panel(bottom, _frame(connection, "cpu_timeline", **params))
    if server:  # the services' metrics, under the rest (the time axis label moves down)
        draw_server_panels(server, scrapes)
        server[-1].set_xlabel(bottom.get_xlabel())
        bottom.set_xlabel("")
    for axis in (top, middle, bottom, *server):
        _mark_windows(axis, windows, label=axis is top)
        axis.grid(True, alpha=0.3)
        _dedup_legend(axis)
    what = "Throughput, power and CPU" + ("" if scrapes.empty else ", latency and server")
    figure.suptitle(f"{what} over time (shaded: load windows)", fontsize=10)
    figure.tight_layout()
    return save(figure, path)


def _throughput_panel(axis: Axes, throughput: pd.DataFrame) -> None:
    """Completions per bin, a step line per pipeline and (trial, phase)."""
    for pipeline, series in throughput.groupby("pipeline", sort=True):
        for _, part in series.groupby(["trial", "phase"], sort=True):
            axis.plot(
                part["t_s"],
                part["queries_per_s"],
                drawstyle="steps-post",
                lw=1,
                label=str(pipeline),
                color=_colour(str(pipeline)),
            )


def _power_panel(axis: Axes, power: pd.DataFrame) -> None:
    """Power per device (its energy sources named), or a note that nothing measured it."""
    for device, series in power.groupby("device", sort=True):
        sources = ", ".join(sorted(series["energy_source"].dropna().unique()))
        for _, part in series.groupby(["trial", "phase"], sort=True):
            axis.plot(
                *gapped(part["t_s"], part["power_w"]),
                lw=1,
                label=f"{device} ({sources})",
                color=_colour(str(device)),
            )
    axis.set_ylabel("power (W)")
    if power.empty:
        axis.text(
            0.5,
            0.5,
            "no energy source (no NVML, RAPL or power model)",
            transform=axis.transAxes,
            ha="center",
            va="center",
            color="grey",
        )


def _cpu_panel(axis: Axes, cpu: pd.DataFrame) -> None:
    """CPU use per series (host, workers), broken where a sampler paused."""
    for name, series in cpu.groupby("series", sort=True):
        for _, part in series.groupby(["trial", "phase"], sort=True):
            axis.plot(
                *gapped(part["t_s"], part["cpu_util"]),
                lw=1,
                label=str(name),
                color=_colour(str(name)),
            )
    axis.set_ylabel("CPU (%)")
    axis.set_xlabel("time since the run's first recorded instant (s)")


_PALETTE = plt.rcParams["axes.prop_cycle"].by_key()["color"]
_ASSIGNED: dict[str, str] = {}


def _colour(name: str) -> str:
    """A stable colour per series name within one process (the same pipeline keeps its colour
    across panels and phases)."""
    if name not in _ASSIGNED:
        _ASSIGNED[name] = _PALETTE[len(_ASSIGNED) % len(_PALETTE)]
    return _ASSIGNED[name]


def _dedup_legend(axis: Axes) -> None:
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        axis.legend(
            unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0)
        )


def plot_stage_breakdown(
    connection: duckdb.DuckDBPyConnection, run_id: str, path: Path
) -> Path | None:
    """Horizontal stacked bars per (pipeline, phase, trial, stage): mean queue wait, join wait
    and service time per visit (ms), from the `stage_breakdown` view (warm-up excluded). The
    three parts add up to the visit's time from its arrival at the stage to its finish."""
    frame = connection.execute(
        "SELECT * FROM stage_breakdown WHERE run_id = ? ORDER BY pipeline, phase, trial, stage",
        [run_id],
    ).df()
    if frame.empty:
        return None
    trials = frame["trial"].nunique()
    labels = [
        f"{r.pipeline} · {_curve_label(int(r.trial), str(r.phase), trials)} · {r.stage}"
        for r in frame.itertuples()
    ]
    parts = [
        ("queue_wait_mean_ms", "queue wait", "#6baed6"),
        ("join_wait_mean_ms", "join wait", "#fd8d3c"),
        ("service_mean_ms", "service", "#74c476"),
    ]
    figure, axis = plt.subplots(figsize=(9, 0.38 * len(frame) + 1.4))
    left = pd.Series(0.0, index=frame.index)
    positions = list(range(len(frame)))[::-1]
    for column, name, colour in parts:
        values = frame[column].astype(float).fillna(0.0)
        axis.barh(positions, values, left=left, color=colour, label=name)
        left = left + values
    for position, total in zip(positions, left, strict=True):
        axis.text(total, position, f" {total:.3g} ms", va="center", fontsize=7)
    axis.set_yticks(positions, labels, fontsize=8)
    axis.set_xlabel("mean per visit (ms)")
    axis.set_xlim(0, float(left.max()) * 1.18 or 1.0)
    axis.grid(True, axis="x", alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    axis.set_title(
        "Stage breakdown: queue wait, join wait and service (warm-up excluded)", fontsize=10
    )
    return save(figure, path)
