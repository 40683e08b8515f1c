"""The PNG of a benchmark's history (`collobench history`, the Dagster `history` asset): one panel
per (machine class, trial, phase, pipeline, metric) series, each run's figure with its within-run
interval, the regimes' means between change points, change points as dashed lines, and the runs
judged `regressed` or `improved` (red, green) or `undecided` off their band (orange) marked.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis.history.change_points import IMPROVED, REGRESSED, UNDECIDED
from analysis.history.verdicts import SERIES_KEYS
from analysis.reports.plots import save

PANEL_WIDTH_IN = 6.0
PANEL_HEIGHT_IN = 2.4
VERDICT_COLOURS = {REGRESSED: "tab:red", IMPROVED: "tab:green", UNDECIDED: "tab:orange"}


def plot_history(history: pd.DataFrame, path: Path, title: str) -> Path | None:
    """Write the history's panels to `path` (PNG); None when the history has no rows."""
    if history.empty:
        return None
    series = list(history.groupby(SERIES_KEYS, sort=False))
    columns = 1 if len(series) < 4 else 2
    rows = math.ceil(len(series) / columns)
    figure, axes = plt.subplots(
        rows,
        columns,
        figsize=(PANEL_WIDTH_IN * columns, PANEL_HEIGHT_IN * rows),
        squeeze=False,
    )
    for axis in axes.flat[len(series) :]:
        axis.set_visible(False)
    classes = history["machine_class"].nunique()
    for axis, (key, frame) in zip(axes.flat, series, strict=False):
        _panel(axis, key, frame.sort_values("run_seq"), show_class=classes > 1)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(figure, path)


def _panel(axis: plt.Axes, key: tuple, frame: pd.DataFrame, show_class: bool) -> None:
    machine_class, trial, phase, pipeline, metric = key
    x = frame["run_seq"].to_numpy()
    y = frame["value"].to_numpy(dtype=float)
    low = (y - frame["ci95_low"].to_numpy(dtype=float)).clip(min=0)
    high = (frame["ci95_high"].to_numpy(dtype=float) - y).clip(min=0)
    axis.errorbar(x, y, yerr=[low, high], fmt="o", color="tab:blue", ms=3, lw=0.8, capsize=2)
    points = [int(seq) for seq in frame.loc[frame["change_point"], "run_seq"]]
    bounds = [int(x[0]), *points, int(x[-1]) + 1]
    for start, end in itertools.pairwise(bounds):
        regime = frame[(frame["run_seq"] >= start) & (frame["run_seq"] < end)]
        if not regime.empty:
            axis.hlines(regime["value"].mean(), start - 0.4, end - 0.6, color="grey", lw=1)
    for seq in points:
        axis.axvline(seq - 0.5, color="tab:red", ls="--", lw=1)
    for verdict, colour in VERDICT_COLOURS.items():
        marked = frame[(frame["verdict"] == verdict) & frame["change_pct"].notna()]
        axis.scatter(marked["run_seq"], marked["value"], s=40, facecolors="none", edgecolors=colour)
    where = f"{machine_class}: " if show_class else ""
    axis.set_title(f"{where}trial {trial} {phase} {pipeline}: {metric}", fontsize=9)
    axis.set_xlabel("run", fontsize=8)
    axis.tick_params(labelsize=8)
