"""The live display of a run: per-pipeline counters on a terminal, one line per phase otherwise
(CI logs), and each pipeline's line at the end of a phase."""

from __future__ import annotations

import time
from typing import Any

from rich.live import Live
from rich.table import Table

from stages.cli.console import out
from stages.cli.render import cell, ci_names, fmt, with_interval
from stages.contracts.counters import QUERY_COUNTS


def _rate(outcome: dict[str, Any]) -> float | None:
    """Ok queries per second between the first issue and the last completion, when known."""
    first: int | None = outcome.get("first_issue_ns")
    last: int | None = outcome.get("last_completed_ns")
    if not first or not last or last <= first:
        return None
    return float(outcome.get("ok", 0)) / ((last - first) / 1e9)


class ProgressDisplay:
    """Live per-pipeline progress on a terminal; one line per phase otherwise (CI logs)."""

    COLUMNS = ("pipeline", "status", "issued", *QUERY_COUNTS, "q/s", "live p99 ms")

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.phase = ""
        self.interactive = out.is_terminal
        self._live: Live | None = None
        self._phase_started = 0.0

    def __enter__(self) -> ProgressDisplay:
        if self.interactive:
            self._live = Live(self._table(), console=out, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def update(self, event: Any) -> None:
        """Take one launcher ProgressEvent (phase_start, progress, done, phase_end)."""
        if event.kind == "phase_start":
            self.phase = phase_title(event.trial, event.phase)
            self.rows = {name: {"status": "preparing"} for name in event.data["pipelines"]}
            self._phase_started = time.monotonic()
            if not self.interactive:
                out.print(f"{self.phase}: {', '.join(event.data['pipelines'])}", highlight=False)
        elif event.kind in ("progress", "done") and event.pipeline:
            row = dict(event.data)
            row["status"] = row["status"] if event.kind == "done" else "running"
            self.rows[event.pipeline] = row
        elif event.kind == "phase_end":
            elapsed_s = time.monotonic() - self._phase_started
            for outcome in event.data["outcomes"]:
                out.print(f"  {phase_line(outcome)} ({elapsed_s:.1f} s)", highlight=False)
        if self._live is not None:
            self._live.update(self._table())

    def _table(self) -> Table:
        table = Table(title=self.phase or "starting", title_justify="left")
        for column in self.COLUMNS:
            table.add_column(
                column, justify="left" if column in ("pipeline", "status") else "right"
            )
        for name, row in self.rows.items():
            table.add_row(
                name,
                *(str(row.get(column, "")) for column in ("status", "issued", *QUERY_COUNTS)),
                fmt(_rate(row)),
                fmt(row.get("live_p99_ms"), "{:.2f}"),
            )
        return table


def phase_title(trial: int, phase: str) -> str:
    """How a phase is named in progress lines: `trial 0 · solo`."""
    return f"trial {trial} · {phase}"


def _interval(figures: dict[str, Any], name: str) -> str:
    """A summary's figure `name` with its interval; `inf` for an infinite percentile."""
    low, high = ci_names(name)
    return with_interval(figures.get(name), figures.get(low), figures.get(high))


def phase_line(outcome: dict[str, Any]) -> str:
    """One pipeline at the end of a phase: the figures the analysis views computed (the same
    as the summary, the manifest and MLflow), or the worker's live counts without them."""
    figures = outcome.get("summary")
    if not figures:
        counts = ", ".join(f"{outcome[name]} {name}" for name in QUERY_COUNTS)
        return (
            f"{outcome['pipeline']}: {outcome['status']}, {counts}, {fmt(_rate(outcome))} "
            f"q/s, live p99 {fmt(outcome.get('live_p99_ms'), '{:.2f}')} ms"
        )
    target = f"p{float(figures.get('target_percentile', 0.99)) * 100:g}"
    return (
        f"{outcome['pipeline']}: {outcome['status']}, {int(figures.get('queries_ok', 0))} ok of "
        f"{int(figures.get('queries_measured', 0))} measured "
        f"({int(figures.get('queries_failed', 0))} failed), "
        f"{_interval(figures, 'queries_per_s')} q/s, "
        f"{target} {_interval(figures, 'latency_target_ms')} ms "
        f"(completed only {cell(figures.get('completed_target_ms'))} ms)"
    )
