"""The contention heatmap of one run (report.md's contention.png): what collocation cost each
pipeline, as throughput ratio and p50/p99 slowdown with their intervals and verdicts, read from
the `contention` or `contention_by_run` view over a read-only connection.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm

from analysis.reports.plots import save

# Heatmap columns: (figure, interval low, interval high, verdict, title).
_CONTENTION_COLUMNS = [
    (
        "throughput_ratio",
        "throughput_ratio_ci_low",
        "throughput_ratio_ci_high",
        "throughput_verdict",
        "throughput ratio\n(collocated / solo)",
    ),
    ("p50_slowdown", "p50_slowdown_ci_low", "p50_slowdown_ci_high", "p50_verdict", "p50 slowdown"),
    ("p99_slowdown", "p99_slowdown_ci_low", "p99_slowdown_ci_high", "p99_verdict", "p99 slowdown"),
]


def contention_rows(connection: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The contention figures to show: `contention_by_run` (intervals over trials) when the run
    has two trials or more, else `contention` (batch-means intervals within the trial); a
    `row` column names each row. A run with subset phases (`collocated:a+b`) gets a row per
    pipeline and co-runner set, named "a with b" ("a with all others" for the full set)."""
    by_run = connection.execute(
        "SELECT * FROM contention_by_run WHERE run_id = ? ORDER BY pipeline, phase", [run_id]
    ).df()
    if not by_run.empty and int(by_run["trials"].max()) >= 2:
        by_run["row"] = _with_co_runners(by_run) + " (" + by_run["trials"].astype(str) + " trials)"
        return by_run
    frame = connection.execute(
        "SELECT * FROM contention WHERE run_id = ? ORDER BY pipeline, phase, trial", [run_id]
    ).df()
    if frame["trial"].nunique() > 1:
        frame["row"] = _with_co_runners(frame) + " (trial " + frame["trial"].astype(str) + ")"
    else:
        frame["row"] = _with_co_runners(frame)
    return frame


def _with_co_runners(frame: pd.DataFrame) -> pd.Series:
    """Each row's pipeline, with its co-runners when the run has subset phases."""
    if not frame["phase"].str.startswith("collocated:").any():
        return frame["pipeline"].astype(str)
    names = []
    for phase, pipeline in zip(frame["phase"], frame["pipeline"], strict=True):
        others = [p for p in str(phase).partition(":")[2].split("+") if p and p != pipeline]
        names.append(f"{pipeline} with {'+'.join(others) or 'all others'}")
    return pd.Series(names, index=frame.index)


def _cell_text(value: float, low: float, high: float, verdict: Any) -> str:
    if value is None or pd.isna(value):
        return "-"
    if math.isinf(value):
        return "inf\nslower"
    text = f"{value:.3f}"
    if not (pd.isna(low) or pd.isna(high)):
        text += f"\n[{low:.3f}, {high:.3f}]"
    else:
        text += "\n(no interval: too few\nqueries per batch)"
    if isinstance(verdict, str):
        text += f"\n{verdict}"
    return text


def _badness(row: Any) -> list[float]:
    """One heatmap row's colours: the log of each figure, signed so that worse is positive; 0
    (white) for no measurable effect, NaN (grey) where there is no figure or no verdict."""
    cells = []
    for value, _low, _high, verdict, _title in _CONTENTION_COLUMNS:
        figure_value = getattr(row, value)
        if pd.isna(figure_value) or figure_value <= 0:
            cells.append(math.nan)
        elif math.isinf(figure_value):
            cells.append(math.log(4.0))  # lost over 1% of its queries collocated: slower
        elif not isinstance(getattr(row, verdict), str):
            cells.append(math.nan)  # no interval, no verdict: drawn grey, not coloured
        elif getattr(row, verdict) == "no measurable effect":
            cells.append(0.0)
        else:
            sign = -1.0 if value == "throughput_ratio" else 1.0
            cells.append(sign * math.log(figure_value))
    return cells


def _label_cells(axis: Axes, frame: pd.DataFrame, matrix: pd.DataFrame) -> None:
    """Each cell's figure, interval and verdict, white on the darkest colours."""
    for i, row in enumerate(frame.itertuples()):
        for j, (value, low, high, verdict, _title) in enumerate(_CONTENTION_COLUMNS):
            shade = matrix.iat[i, j]
            dark = not pd.isna(shade) and abs(shade) > 0.6 * math.log(4.0)
            axis.text(
                j,
                i,
                _cell_text(
                    getattr(row, value),
                    getattr(row, low),
                    getattr(row, high),
                    getattr(row, verdict),
                ),
                color="white" if dark else "black",
                ha="center",
                va="center",
                fontsize=8,
            )


def plot_contention(connection: duckdb.DuckDBPyConnection, run_id: str, path: Path) -> Path | None:
    """A heatmap of what collocation cost each pipeline: throughput ratio, p50 and p99 slowdown,
    each cell with its 95% interval and verdict (the method in the title). Colour is the log of
    the figure, oriented so red is worse (less throughput, more latency) and white is 1; cells
    whose interval spans 1 (within the views' 1% band) are drawn white: no measurable effect.
    None without a collocated phase."""
    frame = contention_rows(connection, run_id)
    if frame.empty:
        return None
    badness = [_badness(row) for row in frame.itertuples()]
    matrix = pd.DataFrame(badness).astype(float).clip(-math.log(4.0), math.log(4.0))
    figure, axis = plt.subplots(figsize=(8.5, 1.0 * len(frame) + 1.6))
    colours = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#d9d9d9")
    axis.imshow(
        np.ma.masked_invalid(matrix.to_numpy()),
        cmap=colours,
        norm=TwoSlopeNorm(vcenter=0.0, vmin=-math.log(4.0), vmax=math.log(4.0)),
        aspect="auto",
    )
    _label_cells(axis, frame, matrix)
    axis.set_xticks(
        range(len(_CONTENTION_COLUMNS)), [c[4] for c in _CONTENTION_COLUMNS], fontsize=8
    )
    axis.set_yticks(range(len(frame)), list(frame["row"]), fontsize=8)
    methods = ", ".join(sorted(frame["ci_method"].dropna().unique())) or "none"
    axis.set_title(
        f"Contention: collocated vs solo, 95% intervals ({methods})\n"
        "red = worse, blue = better, white = no measurable effect, grey = no interval",
        fontsize=10,
    )
    return save(figure, path)
