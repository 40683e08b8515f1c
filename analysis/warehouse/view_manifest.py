"""The view files (analysis/sql/views) declared as data: what each creates, which other view
files it reads, and, for a stored summary, the guard that lets the loader skip its definition.

The loader sets up only the files a summary needs (`files_defining`) and skips a definition its
guard says is empty (`guards`): both come from this table, never from the SQL text.
tests/analysis/test_view_manifest.py holds the table to the SQL (each file's CREATE statements,
the objects its statements reference, its `-- empty unless:` comment), so it cannot drift.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFINITION_SUFFIX = "_from_rows"
"""A view named `<x>_from_rows` is a summary's definition over the raw rows, not a figure."""
SUMMARY_PREFIX = "summary_"
"""The stored summary of view `<x>` is the table `summary_<x>`, filled from `<x>_from_rows`."""


@dataclass(frozen=True)
class RowsWith:
    """A summary's guard: its definition is empty unless some row of `table` has `column` set
    (not NULL), so a batch without such rows skips it."""

    table: str
    column: str

    def query(self) -> str:
        """A cheap SELECT of one boolean, false only when no such row exists."""
        return f"SELECT count(*) > 0 FROM {self.table} WHERE {self.column} IS NOT NULL"


@dataclass(frozen=True)
class ViewFile:
    """One file of analysis/sql/views: the objects it creates (views, macros, a summary table),
    the view files whose objects it reads, a stored summary's guard (None: always run), and
    which of its views no per-run report shows, each with why (analysis.reports.catalogue checks
    that every view is reported or named so)."""

    file: str
    creates: tuple[str, ...]
    reads: tuple[str, ...] = ()
    empty_unless: RowsWith | None = None
    not_reported: Mapping[str, str] = field(default_factory=dict)

    @property
    def summary_table(self) -> str | None:
        """The summary table this file creates (`summary_<view>`), if any."""
        return next((name for name in self.creates if name.startswith(SUMMARY_PREFIX)), None)


def _summary(view: str) -> tuple[str, ...]:
    """What a summarised view's file creates: its definition, its table and the view."""
    return (f"{view}{DEFINITION_SUFFIX}", f"{SUMMARY_PREFIX}{view}", view)


_MACROS = "00_macros.sql"
_THROUGHPUT = "10_throughput.sql"
_QUERY_LATENCY = "15_query_latency.sql"
_PIPELINE_SPECS = "16_pipeline_specs.sql"
_MEASURED_EVENTS = "17_measured_stage_events.sql"
_LATENCY = "20_latency.sql"
_LOAD_WINDOWS = "35_load_windows.sql"
_ENERGY_SAMPLES = "36_energy_samples.sql"
_ENERGY = "40_energy.sql"
_GRADED = RowsWith("stage_events", "graded")
_TRAINED = RowsWith("stage_events", "loss")
_STREAMED = RowsWith("stage_events", "first_token_ns")

# Every view file, in load order (sorted by name: a file comes after the files it reads).
VIEW_FILES: tuple[ViewFile, ...] = (
    ViewFile(
        _MACROS,
        creates=(
            "loadgen_quantile",
            "loadgen_quantile_levels",
            "loadgen_quantiles",
            "loadgen_list_quantiles",
            "tpot_ms",
            "token_visit",
            "t975",
            "wilson95",
            "ci_batches",
            "batch_slice",
            "batch_count",
            "batch_min_size",
            "batch_se",
            "ci_verdict",
            "log_ratio_half",
            "at_least_zero",
        ),
    ),
    ViewFile(_THROUGHPUT, _summary("throughput"), reads=(_MACROS,)),
    ViewFile(
        _QUERY_LATENCY,
        ("query_latency",),
        not_reported={
            "query_latency": "one row per query: the building block of latency and goodput"
        },
    ),
    ViewFile(
        "16_pipeline_outcomes.sql",
        ("pipeline_outcomes",),
        not_reported={
            "pipeline_outcomes": "each pipeline's counts from the manifest: read by throughput"
        },
    ),
    ViewFile(
        _PIPELINE_SPECS,
        ("pipeline_specs",),
        not_reported={"pipeline_specs": "each pipeline's spec fields: read by the other views"},
    ),
    ViewFile(
        "16_run_warnings.sql",
        ("run_warnings",),
        not_reported={"run_warnings": "the manifest's warnings: the run summary prints them"},
    ),
    ViewFile("16_slo_verdicts.sql", ("slo_verdicts",)),
    ViewFile(_MEASURED_EVENTS, ("measured_stage_events_from_rows",)),
    ViewFile(_LATENCY, _summary("latency"), reads=(_MACROS, _QUERY_LATENCY)),
    ViewFile("21_latency_by_run.sql", ("latency_by_run",), reads=(_MACROS, _THROUGHPUT, _LATENCY)),
    ViewFile(
        "25_goodput.sql",
        _summary("goodput"),
        reads=(_MACROS, _THROUGHPUT, _QUERY_LATENCY, _PIPELINE_SPECS),
    ),
    ViewFile("30_stage_breakdown.sql", _summary("stage_breakdown"), reads=(_MACROS,)),
    ViewFile("31_stage_concurrency.sql", ("stage_concurrency",)),
    ViewFile(
        _LOAD_WINDOWS,
        _summary("load_windows"),
        not_reported={
            "load_windows": "each phase's load window: read by the energy and host views"
        },
    ),
    ViewFile(
        _ENERGY_SAMPLES,
        ("energy_samples",),
        not_reported={"energy_samples": "telemetry samples with energy: read by energy"},
    ),
    ViewFile(
        "37_idle_power.sql",
        ("idle_power",),
        reads=(_ENERGY_SAMPLES,),
        not_reported={"idle_power": "the idle baseline: read by energy_comparison"},
    ),
    ViewFile(_ENERGY, ("energy",), reads=(_LOAD_WINDOWS, _ENERGY_SAMPLES, "37_idle_power.sql")),
    ViewFile("42_energy_split.sql", ("energy_split",), reads=(_THROUGHPUT, _LOAD_WINDOWS, _ENERGY)),
    ViewFile(
        "45_energy_comparison.sql",
        ("energy_comparison",),
        reads=(_THROUGHPUT, _LOAD_WINDOWS, _ENERGY),
        not_reported={"energy_comparison": "energy against the idle baseline: `collobench sql`"},
    ),
    ViewFile("50_perf_per_watt.sql", ("perf_per_watt",), reads=(_THROUGHPUT, _ENERGY)),
    ViewFile(
        "55_phase_figures.sql",
        ("phase_figures",),
        reads=(_THROUGHPUT, _LATENCY),
        not_reported={
            "phase_figures": "each phase's headline figures: read by contention and interference"
        },
    ),
    ViewFile(
        "60_contention.sql",
        ("contention", "contention_by_run"),
        reads=(_MACROS, "45_energy_comparison.sql", "55_phase_figures.sql"),
    ),
    ViewFile("65_interference.sql", ("interference",), reads=(_THROUGHPUT, "60_contention.sql")),
    ViewFile(
        "70_host_load.sql",
        ("host_load",),
        reads=(_LOAD_WINDOWS,),
        not_reported={
            "host_load": "host CPU load per window: the run summary's foreign-load warnings"
        },
    ),
    ViewFile(
        "80_accuracy.sql",
        _summary("accuracy"),
        reads=(_MACROS, _MEASURED_EVENTS),
        empty_unless=_GRADED,
    ),
    ViewFile(
        "81_training.sql", _summary("training"), reads=(_MEASURED_EVENTS,), empty_unless=_TRAINED
    ),
    ViewFile(
        "85_tokens.sql", _summary("tokens"), reads=(_MACROS, _THROUGHPUT), empty_unless=_STREAMED
    ),
    ViewFile(
        "86_token_goodput.sql",
        _summary("token_goodput"),
        reads=(_MACROS, _THROUGHPUT, _QUERY_LATENCY, _PIPELINE_SPECS),
        empty_unless=_STREAMED,
    ),
    ViewFile(
        "87_server_metrics.sql",
        ("server_metric_names", "server_metrics"),
        reads=(_QUERY_LATENCY, _LOAD_WINDOWS),
        not_reported={
            "server_metrics": "one row per scrape of a service's metrics: drawn under the "
            "timeline plot (timeline.png); `collobench sql`",
            "server_metric_names": "the servers' metric names mapped to common figures: read by "
            "server_metrics",
        },
    ),
    ViewFile(
        "88_sessions.sql",
        ("sessions",),
        reads=(_MACROS,),
        not_reported={
            "sessions": "per turn of multi-turn sessions (TTFT per turn, history growth): "
            "`collobench sql \"SELECT * FROM sessions\"`; a session's duration is its query's "
            "latency"
        },
    ),
    ViewFile(
        "90_operators.sql",
        ("profiled_queries", "operator_summary"),
        not_reported={"profiled_queries": "profiled queries: read by operator_summary"},
    ),
    ViewFile("95_capacity.sql", ("capacity", "capacity_region")),
    ViewFile(
        "96_run_history.sql",
        ("run_history",),
        reads=(_THROUGHPUT, _LATENCY),
        not_reported={
            "run_history": "every run of a spec, not one run: `collobench history` and the "
            "Dagster `history` asset judge it (analysis.history.verdicts)"
        },
    ),
    ViewFile(
        "97_ab_verdicts.sql",
        ("ab_verdicts",),
        not_reported={
            "ab_verdicts": "per A/B session and figure, not per run: `collobench ab` prints it; "
            '`collobench sql "SELECT * FROM ab_verdicts"`'
        },
    ),
)

BY_FILE: dict[str, ViewFile] = {view_file.file: view_file for view_file in VIEW_FILES}


def not_reported() -> dict[str, str]:
    """Every view no per-run report shows -> why (the view files' `not_reported`)."""
    return {view: why for entry in VIEW_FILES for view, why in entry.not_reported.items()}


def summary_tables() -> tuple[str, ...]:
    """The summary tables in view-file order (a summary may read an earlier one)."""
    return tuple(table for entry in VIEW_FILES if (table := entry.summary_table) is not None)


@functools.cache
def files_defining(names: frozenset[str]) -> tuple[str, ...]:
    """The view files that create `names`, and every file those read (transitively), in load
    order: what a database needs to answer queries on `names` without every other view."""
    needed = {entry.file for entry in VIEW_FILES if set(entry.creates) & names}
    pending = list(needed)
    while pending:
        for read in BY_FILE[pending.pop()].reads:
            if read not in needed:
                needed.add(read)
                pending.append(read)
    return tuple(entry.file for entry in VIEW_FILES if entry.file in needed)


def summary_files() -> tuple[str, ...]:
    """The view files computing the summaries needs: the figures built on summaries
    (contention, energy, ...) are left out of the loader's database, which saves setting them
    up once per batch."""
    return files_defining(frozenset(summary_tables()))


def guards() -> dict[str, str]:
    """Summary table -> its guard query (the summaries that declare one)."""
    return {
        table: entry.empty_unless.query()
        for entry in VIEW_FILES
        if entry.empty_unless is not None and (table := entry.summary_table) is not None
    }


def definition_of(table: str) -> str:
    """The definition view a summary table is filled from: `summary_x` -> `x_from_rows`."""
    return table.removeprefix(SUMMARY_PREFIX) + DEFINITION_SUFFIX
