"""The PNG of an A/B session: per figure, each kept block's paired difference (B against A, in
%) in block order, with the session's change, its 95% interval and the equivalence margin band,
so a reader sees whether the verdict rests on a steady shift or on a few blocks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless

import matplotlib.pyplot as plt

DPI = 110


@dataclass(frozen=True)
class PlottedFigure:
    """One figure of the session as drawn."""

    figure: str  # pipeline/metric
    block_changes_pct: Sequence[float]  # exp(d_k) - 1 per kept block, in %
    change_pct: float
    change_ci95: tuple[float, float]
    verdict: str


def plot_session(
    figures: Sequence[PlottedFigure], margin_pct: float, path: Path, title: str
) -> Path | None:
    """Write the PNG (one panel per figure); None when there is nothing to draw."""
    if not figures:
        return None
    columns = min(3, len(figures))
    rows = math.ceil(len(figures) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False, dpi=DPI
    )
    for index, item in enumerate(figures):
        axis = axes[index // columns][index % columns]
        blocks = range(1, len(item.block_changes_pct) + 1)
        axis.axhspan(-margin_pct, margin_pct, color="#e5f5e0", label=f"+-{margin_pct:g}% margin")
        axis.axhline(0.0, color="#636363", linewidth=0.8)
        low, high = item.change_ci95
        low = low if math.isfinite(low) else -100.0
        high = high if math.isfinite(high) else max([margin_pct, *item.block_changes_pct]) * 1.5
        axis.axhspan(low, high, color="#fdd0a2", alpha=0.6, label="95% interval")
        axis.axhline(item.change_pct, color="#d94801", linewidth=1.5, label="change")
        axis.plot(list(blocks), list(item.block_changes_pct), "o", color="#3182bd", ms=3.5)
        axis.set_title(f"{item.figure}: {item.verdict}", fontsize=9)
        axis.set_xlabel("block")
        axis.set_ylabel("B vs A, %")
    for index in range(len(figures), rows * columns):
        axes[index // columns][index % columns].axis("off")
    axes[0][0].legend(fontsize=7, loc="best")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
