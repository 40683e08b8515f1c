"""The report catalogue: which warehouse views a run's report shows, each with its row order,
titles, the columns each report prints and how numbers are written.

`collobench report` and the tables after `collobench run` (stages.cli), report.md
(analysis.report_file) and the Dagster report assets (bench_defs.reports) all read this one
table. A column named here that a view's SQL does not produce, a view named here that the
warehouse lacks, or a warehouse view named nowhere here is an error (CatalogueError), never a
silent drop. Pure Python with no imports of ours: the Dagster definitions import it at load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stages.rundir.layout import TABLES

CATALOGUE_FILE = "analysis/report_catalogue.py"


class CatalogueError(LookupError):
    """The catalogue and the warehouse's views disagree (a view or a column)."""


@dataclass(frozen=True)
class NumberFormat:
    """How a table cell writes a value: None and NaN as `missing`; a float with
    `significant_digits` significant digits, with no decimals at or above `fixed_from` in
    magnitude, and an infinity as `infinite` when set; anything else as str()."""

    significant_digits: int = 4
    fixed_from: float | None = None
    infinite: str | None = None
    missing: str = "-"

    def __call__(self, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return self.missing
        if not isinstance(value, float):
            return str(value)
        if self.infinite is not None and math.isinf(value):
            return self.infinite
        if self.fixed_from is not None and not abs(value) < self.fixed_from:
            return f"{value:.0f}"
        return f"{value:.{self.significant_digits}g}"


# Terminal tables (`collobench report`, `compare`): a count of nanoseconds or bytes reads whole.
TERMINAL_NUMBERS = NumberFormat(significant_digits=4, fixed_from=1e6)
# Markdown tables (report.md, Dagster metadata): +inf and -inf both read "inf".
MARKDOWN_NUMBERS = NumberFormat(significant_digits=4, infinite="inf")

# A Markdown column: (header, cell), the cell a column name or `x|x_ci_low|x_ci_high` for a
# value with its interval (analysis.report_file.markdown_table).
MarkdownColumns = tuple[tuple[str, str], ...]


def names(text: str) -> tuple[str, ...]:
    """Column names written as one space-separated string (keeps the catalogue readable)."""
    return tuple(text.split())


def cell_columns(cell: str) -> tuple[str, ...]:
    """The view columns a Markdown cell spec reads (`x|low|high` reads three)."""
    return tuple(cell.split("|"))


@dataclass(frozen=True)
class Section:
    """A view as a Markdown table in report.md; with `rows_with`, only the rows where that
    column is set (the section is left out when none is)."""

    title: str
    columns: MarkdownColumns
    rows_with: str | None = None


@dataclass(frozen=True)
class Asset:
    """A view as a Dagster report asset (named after the view): its description, Markdown
    table, the plots (keys of PLOTS) shown inline, and the text shown when it has no rows."""

    description: str
    columns: MarkdownColumns
    plots: tuple[str, ...]
    empty_note: str = "No rows for this run."


@dataclass(frozen=True)
class ReportView:
    """One view reported per run (or, in CAPACITY_CATALOGUE, per `key`: a capacity search or
    region). `terminal` is what `collobench report` prints (its title is the view's name;
    `x_ci_low`/`x_ci_high` fold into x's cell); `after_run_title` titles the same columns
    after `collobench run` when set; `report_md` and `asset` when set."""

    view: str
    order_by: tuple[str, ...]
    terminal: tuple[str, ...]
    after_run_title: str | None = None
    report_md: Section | None = None
    asset: Asset | None = None
    key: str = "run_id"

    def columns(self) -> set[str]:
        """Every column of the view this entry names (order, terminal, Markdown)."""
        named = {term.split()[0] for term in self.order_by} | set(self.terminal)
        markdown = (self.report_md.columns if self.report_md else ()) + (
            self.asset.columns if self.asset else ()
        )
        for _, cell in markdown:
            named.update(cell_columns(cell))
        if self.report_md is not None and self.report_md.rows_with is not None:
            named.add(self.report_md.rows_with)
        return named


@dataclass(frozen=True)
class Plot:
    """A PNG report_file draws beside report.md (key, file name, title)."""

    key: str
    file_name: str
    title: str


PLOTS: tuple[Plot, ...] = (
    Plot("latency_cdf", "latency_cdf.png", "Latency distribution"),
    Plot("timeline", "timeline.png", "Over time: throughput, power and CPU"),
    Plot("stage_breakdown", "stage_breakdown.png", "Stage breakdown"),
    Plot("contention", "contention.png", "Contention"),
)

_RUN_KEYS = ("trial", "phase", "pipeline")
_KEYS: MarkdownColumns = tuple((key, key) for key in _RUN_KEYS)
_QPS = "queries_per_s|queries_per_s_ci_low|queries_per_s_ci_high"
_P50_MS = "latency_p50_ms|latency_p50_ci_low_ms|latency_p50_ci_high_ms"
_P99_MS = "latency_p99_ms|latency_p99_ci_low_ms|latency_p99_ci_high_ms"
_RATIO = "throughput_ratio|throughput_ratio_ci_low|throughput_ratio_ci_high"
_P50_SLOWDOWN = "p50_slowdown|p50_slowdown_ci_low|p50_slowdown_ci_high"
_P99_SLOWDOWN = "p99_slowdown|p99_slowdown_ci_low|p99_slowdown_ci_high"
_METHOD = ("interval method", "ci_method")

# Every view reported per run, in the order `collobench report` prints them; each has a run_id.
CATALOGUE: tuple[ReportView, ...] = (
    ReportView(
        "throughput",
        order_by=_RUN_KEYS,
        terminal=names(
            "trial phase pipeline ok_queries dropped errors timeouts not_issued window_s "
            "queries_per_s queries_per_s_ci_low queries_per_s_ci_high samples_per_s"
        ),
        report_md=Section(
            "Throughput per trial (ok queries per second; batch means within the trial)",
            (*_KEYS, ("q/s", _QPS), ("ok", "ok_queries"), _METHOD),
        ),
        asset=Asset(
            "Ok queries per second per trial, phase and pipeline, with 95% intervals; "
            "the timeline plot.",
            (
                *_KEYS,
                ("q/s", _QPS),
                ("ok", "ok_queries"),
                ("dropped", "dropped"),
                ("errors", "errors"),
                _METHOD,
            ),
            plots=("timeline",),
        ),
    ),
    ReportView(
        "latency",
        order_by=_RUN_KEYS,
        terminal=names(
            "trial phase pipeline measured_queries failed_queries latency_p50_ms "
            "latency_p50_ci_low_ms latency_p50_ci_high_ms latency_p90_ms latency_p99_ms "
            "latency_p99_ci_low_ms latency_p99_ci_high_ms latency_p999_ms completed_p99_ms "
            "from_issue_p99_ms issue_delay_p50_us issue_delay_p99_us ci_method"
        ),
        report_md=Section(
            "Latency per trial (ms from the scheduled arrival; failures count as +inf)",
            (*_KEYS, ("p50", _P50_MS), ("p99", _P99_MS), ("failed", "failed_queries"), _METHOD),
        ),
        asset=Asset(
            "p50 and p99 from the scheduled arrival, with 95% intervals; the latency CDF "
            "and stage breakdown plots.",
            (
                *_KEYS,
                ("p50 ms", _P50_MS),
                ("p99 ms", _P99_MS),
                ("failed", "failed_queries"),
                _METHOD,
            ),
            plots=("latency_cdf", "stage_breakdown"),
        ),
    ),
    ReportView(
        "latency_by_run",
        order_by=("phase", "pipeline"),
        terminal=names(
            "phase pipeline trials latency_p50_ms latency_p50_ci_low_ms latency_p50_ci_high_ms "
            "latency_p99_ms latency_p99_ci_low_ms latency_p99_ci_high_ms queries_per_s "
            "queries_per_s_ci_low queries_per_s_ci_high ci_method"
        ),
    ),
    ReportView(
        "goodput",
        order_by=_RUN_KEYS,
        terminal=names(
            "trial phase pipeline slo_ms queries good_queries goodput_share "
            "goodput_share_ci_low goodput_share_ci_high goodput_per_s queries_per_s ci_method"
        ),
    ),
    ReportView(
        "slo_verdicts",
        order_by=_RUN_KEYS,
        terminal=names("trial phase pipeline slo_ms percentile queries over_slo slo_verdict"),
        report_md=Section(
            "SLO verdicts (met: LoadGen's early-stopping rule; missed: too many queries over "
            "the SLO to meet the percentile; undecided: too few queries to tell; 99% "
            "confidence, failures over the SLO)",
            (
                *_KEYS,
                ("SLO ms", "slo_ms"),
                ("percentile", "percentile"),
                ("queries", "queries"),
                ("over SLO", "over_slo"),
                ("verdict", "slo_verdict"),
            ),
        ),
    ),
    ReportView(
        "stage_breakdown",
        order_by=(*_RUN_KEYS, "stage"),
        terminal=names(
            "trial phase pipeline stage visits join_wait_mean_ms queue_wait_p50_ms "
            "queue_wait_p99_ms service_p50_ms service_p99_ms"
        ),
    ),
    ReportView(
        "energy",
        order_by=(*_RUN_KEYS, "device"),
        terminal=names("trial phase pipeline device energy_source energy_j mean_power_w"),
    ),
    ReportView(
        "energy_split",
        order_by=("trial", "phase", "window_pipeline", "device", "consumer", "pipeline"),
        terminal=names(
            "trial phase window_pipeline device consumer pipeline method share energy_j "
            "total_energy_j energy_source"
        ),
        after_run_title="energy split (an attribution by utilisation share, method named; "
        "total_energy_j measured; window_pipeline: whose solo window)",
        report_md=Section(
            "Energy and CPU share per consumer (each window's device energy attributed by "
            "utilisation share, the method named: a pipeline, a service the benchmark started, "
            "or other; window: whose solo baseline, '-' when collocated)",
            (
                ("trial", "trial"),
                ("phase", "phase"),
                ("window", "window_pipeline"),
                ("device", "device"),
                ("consumer", "consumer"),
                ("name", "pipeline"),
                ("share", "share"),
                ("energy J", "energy_j"),
                ("window energy J", "total_energy_j"),
                ("method", "method"),
                ("energy source", "energy_source"),
            ),
        ),
    ),
    ReportView(
        "perf_per_watt",
        order_by=(*_RUN_KEYS, "device"),
        terminal=names("trial phase pipeline device energy_source queries_per_j j_per_query"),
        after_run_title="performance per watt (energy source named; model_estimate = a model)",
        asset=Asset(
            "Queries per joule with the energy source named; the timeline plot.",
            (
                *_KEYS,
                ("device", "device"),
                ("energy source", "energy_source"),
                ("energy J", "energy_j"),
                ("mean W", "mean_power_w"),
                ("queries/J", "queries_per_j"),
                ("J/query", "j_per_query"),
            ),
            plots=("timeline",),
            empty_note="No energy source measured this run (no NVML, RAPL or power model).",
        ),
    ),
    ReportView(
        "contention",
        order_by=_RUN_KEYS,
        terminal=names(
            "trial pipeline throughput_ratio throughput_ratio_ci_low throughput_ratio_ci_high "
            "throughput_verdict p99_slowdown p99_slowdown_ci_low p99_slowdown_ci_high "
            "p99_verdict solo_failed collocated_failed energy_per_query_ratio ci_method"
        ),
        after_run_title="contention per trial (collocated vs solo; [95% interval])",
        report_md=Section(
            "Contention per trial (collocated / solo; an interval spanning 1 is no measurable "
            "effect)",
            (
                *_KEYS,
                ("throughput ratio", _RATIO),
                ("verdict", "throughput_verdict"),
                ("p50 slowdown", _P50_SLOWDOWN),
                ("verdict ", "p50_verdict"),  # trailing spaces: Markdown headers stay distinct
                ("p99 slowdown", _P99_SLOWDOWN),
                ("verdict  ", "p99_verdict"),
                _METHOD,
            ),
        ),
        asset=Asset(
            "Collocated vs solo: throughput ratio and p50/p99 slowdowns with intervals "
            "and verdicts; the contention heatmap.",
            (
                ("trial", "trial"),
                ("pipeline", "pipeline"),
                ("throughput ratio", _RATIO),
                ("verdict", "throughput_verdict"),
                ("p50 slowdown", _P50_SLOWDOWN),
                ("p99 slowdown", _P99_SLOWDOWN),
                ("verdict ", "p99_verdict"),
            ),
            plots=("contention",),
            empty_note="No contention: the run has no collocated phase with solo baselines.",
        ),
    ),
    ReportView(
        "contention_by_run",
        order_by=("phase", "pipeline"),
        terminal=names(
            "phase pipeline trials throughput_ratio throughput_ratio_ci_low "
            "throughput_ratio_ci_high throughput_verdict p99_slowdown p99_slowdown_ci_low "
            "p99_slowdown_ci_high p99_verdict ci_method"
        ),
        after_run_title="contention over the trials (geometric mean; [95% interval])",
    ),
    ReportView(
        "interference",
        order_by=("trial", "pipeline", "pipelines_in_phase", "co_runner_set"),
        terminal=names(
            "trial pipeline co_runner_set throughput_ratio throughput_ratio_ci_low "
            "throughput_ratio_ci_high throughput_verdict p99_slowdown p99_slowdown_ci_low "
            "p99_slowdown_ci_high p99_verdict collocated_failed"
        ),
        after_run_title="interference per trial (each pipeline with each co-runner set vs "
        "solo; [95% interval])",
    ),
    ReportView(
        "accuracy",
        order_by=(*_RUN_KEYS, "stage"),
        terminal=names(
            "trial phase pipeline stage graded correct accuracy accuracy_ci_low "
            "accuracy_ci_high ci_method"
        ),
        after_run_title="accuracy (graded samples of measured queries; [Wilson 95% interval])",
    ),
    ReportView(
        "training",
        order_by=(*_RUN_KEYS, "stage"),
        terminal=names(
            "trial phase pipeline stage steps first_loss last_loss min_loss tail_mean_loss"
        ),
        after_run_title="training (loss per optimiser step)",
    ),
    ReportView(
        "tokens",
        order_by=(*_RUN_KEYS, "stage"),
        terminal=names(
            "trial phase pipeline stage queries tokens ttft_p50_ms ttft_p99_ms "
            "stage_ttft_p50_ms tpot_p50_ms tpot_p99_ms itl_p50_ms itl_p99_ms tokens_per_s"
        ),
        after_run_title="tokens (TTFT from arrival and in the stage, TPOT, inter-token "
        "latency; ms; output tokens/s)",
        report_md=Section(
            "Tokens per trial (ms; TTFT from the scheduled arrival; TPOT: mean time per output "
            "token of a query; ITL: gaps between streamed chunks, '-' when not streamed; "
            "LoadGen's percentiles)",
            (
                *_KEYS,
                ("stage", "stage"),
                ("TTFT p50", "ttft_p50_ms"),
                ("TTFT p99", "ttft_p99_ms"),
                ("TPOT p50", "tpot_p50_ms"),
                ("TPOT p99", "tpot_p99_ms"),
                ("ITL p50", "itl_p50_ms"),
                ("ITL p99", "itl_p99_ms"),
                ("tokens/s", "tokens_per_s"),
            ),
        ),
    ),
    ReportView(
        "token_goodput",
        order_by=(*_RUN_KEYS, "stage"),
        terminal=names(
            "trial phase pipeline stage ttft_slo_ms tpot_slo_ms queries good_queries "
            "goodput_share goodput_share_ci_low goodput_share_ci_high goodput_per_s "
            "good_tokens_per_s ci_method"
        ),
        after_run_title="token goodput (queries within ttft_slo_ms and tpot_slo_ms out of "
        "every measured query; [Wilson 95% interval])",
        report_md=Section(
            "Token goodput per trial (ok queries within the token SLOs set, '-' for one not "
            "set, out of every measured query, failures included)",
            (
                *_KEYS,
                ("stage", "stage"),
                ("TTFT SLO ms", "ttft_slo_ms"),
                ("TPOT SLO ms", "tpot_slo_ms"),
                ("queries", "queries"),
                ("good", "good_queries"),
                ("goodput share", "goodput_share|goodput_share_ci_low|goodput_share_ci_high"),
                _METHOD,
                ("good q/s", "goodput_per_s"),
                ("good tokens/s", "good_tokens_per_s"),
            ),
            rows_with="ci_method",  # a token SLO is set
        ),
    ),
    ReportView(
        "operator_summary",
        order_by=(*_RUN_KEYS, "stage", "self_cpu_ms DESC"),
        terminal=names("trial phase pipeline stage operator calls self_cpu_ms self_share"),
    ),
)

# The capacity views (issue 19), reported per capacity search (`search_id`) or region
# (`region_id`), not per run: analysis.capacity_warehouse.capacity_table reads them, the capacity
# command prints them with these columns.
CAPACITY_CATALOGUE: tuple[ReportView, ...] = (
    ReportView(
        "capacity",
        key="search_id",
        order_by=("search_id",),
        terminal=names(
            "search_id pipeline slo_ms percentile certified_qps estimate_qps "
            "estimate_qps_ci_low estimate_qps_ci_high bracket_lo bracket_hi bracket_ratio "
            "stop_reason probes undecided_probes flagged_probes aborted_probes "
            "monotonicity_violations"
        ),
    ),
    ReportView(
        "capacity_region",
        key="region_id",
        order_by=("region_id", "ray_index"),
        terminal=names(
            "region_id angle_deg certified_s certified_x certified_y certified_sum estimate_s "
            "estimate_s_ci_low estimate_s_ci_high estimate_sum estimate_sum_ci_low "
            "estimate_sum_ci_high stop_reason"
        ),
    ),
)

# The views shown after `collobench run` (each with its after_run_title), in that order: what
# the run summary does not already say.
AFTER_RUN: tuple[str, ...] = names(
    "accuracy training tokens token_goodput perf_per_watt energy_split contention "
    "contention_by_run interference"
)

# Warehouse views that are not reported per run, and why; views named `<x>_from_rows` are the
# row-level sources of a summary table (`x` reads the table) and need no entry.
NOT_REPORTED: dict[str, str] = {
    "query_latency": "one row per query: the building block of latency and goodput",
    "pipeline_outcomes": "each pipeline's counts from the manifest: read by throughput",
    "pipeline_specs": "each pipeline's spec fields: read by the other views",
    "run_warnings": "the manifest's warnings: the run summary prints them",
    "load_windows": "each phase's load window: read by the energy and host views",
    "energy_samples": "telemetry samples with energy: read by energy",
    "idle_power": "the idle baseline: read by energy_comparison",
    "energy_comparison": "energy against the idle baseline: `collobench sql`",
    "phase_figures": "each phase's headline figures: read by contention and interference",
    "host_load": "host CPU load per window: the run summary's foreign-load warnings",
    "profiled_queries": "profiled queries: read by operator_summary",
    **{table: "raw rows: a view over the loaded runs' Parquet files" for table in TABLES},
}
ROW_SOURCE_SUFFIX = "_from_rows"

# `collobench compare`: the comparison's columns shown (analysis.compare.COLUMNS holds them
# all), ratio_ci_low/high folded into the ratio's cell; the title names run B and run A.
COMPARISON_TITLE = (
    "{run_b} (B, host {host_b}) against {run_a} (A, host {host_a}): ratio B / A "
    "[95% interval]; trial 'all' = over the trials"
)
COMPARISON_TERMINAL = names(
    "trial phase pipeline metric a_value b_value ratio ratio_ci_low ratio_ci_high verdict "
    "a_failed_queries b_failed_queries ci_method"
)
# The Dagster regression check's Markdown table of the figures that got worse: run A is the
# partition's previous run, run B this one (bench_defs.checks).
COMPARISON_MARKDOWN: MarkdownColumns = (
    *_KEYS,
    ("metric", "metric"),
    ("previous", "a_value"),
    ("this run", "b_value"),
    ("ratio", "ratio|ratio_ci_low|ratio_ci_high"),
    ("verdict", "verdict"),
)

BY_VIEW: dict[str, ReportView] = {entry.view: entry for entry in CATALOGUE}
BY_CAPACITY_VIEW: dict[str, ReportView] = {entry.view: entry for entry in CAPACITY_CATALOGUE}


def entry(view: str) -> ReportView:
    """The catalogue entry of `view` (per run, or a capacity view); CatalogueError when it
    has none."""
    found = BY_VIEW.get(view) or BY_CAPACITY_VIEW.get(view)
    if found is None:
        raise CatalogueError(f"view {view!r} has no entry in {CATALOGUE_FILE}")
    return found


def check_columns(view: str, present: Iterable[str]) -> None:
    """CatalogueError naming the view and each column the catalogue names for it that its SQL
    output (`present`) lacks."""
    missing = sorted(entry(view).columns() - set(present))
    if missing:
        raise CatalogueError(
            f"view {view!r} has no column {', '.join(map(repr, missing))} "
            f"(named in {CATALOGUE_FILE})"
        )


def check_views(warehouse_views: Iterable[str]) -> None:
    """CatalogueError when a catalogued view is not in the warehouse, or a warehouse view is
    neither catalogued, nor in NOT_REPORTED, nor a `<x>_from_rows` source."""
    present = set(warehouse_views)
    absent = [view for view in BY_VIEW if view not in present]
    if absent:
        raise CatalogueError(
            f"{CATALOGUE_FILE} names view(s) the warehouse lacks: {', '.join(absent)}"
        )
    known = set(BY_VIEW) | set(BY_CAPACITY_VIEW) | set(NOT_REPORTED)
    unnamed = sorted(view for view in present - known if not view.endswith(ROW_SOURCE_SUFFIX))
    if unnamed:
        raise CatalogueError(
            f"warehouse view(s) with no entry in {CATALOGUE_FILE} (CATALOGUE, "
            f"CAPACITY_CATALOGUE or NOT_REPORTED): "
            f"{', '.join(unnamed)}"
        )


def _check_catalogue() -> None:
    """The catalogue agrees with itself: one entry per view, AFTER_RUN names exactly the
    entries with an after_run_title, every asset's plots are in PLOTS."""
    capacity = set(BY_CAPACITY_VIEW)
    if (
        len(BY_VIEW) != len(CATALOGUE)
        or len(capacity) != len(CAPACITY_CATALOGUE)
        or set(BY_VIEW) & set(NOT_REPORTED)
        or capacity & (set(BY_VIEW) | set(NOT_REPORTED))
    ):
        raise CatalogueError(f"{CATALOGUE_FILE}: a view is named twice")
    titled = {view.view for view in CATALOGUE if view.after_run_title}
    if set(AFTER_RUN) != titled or len(AFTER_RUN) != len(titled):
        raise CatalogueError(f"{CATALOGUE_FILE}: AFTER_RUN {AFTER_RUN} != titled {titled}")
    plots = {plot.key for plot in PLOTS}
    for view in CATALOGUE:
        unknown = set(view.asset.plots if view.asset else ()) - plots
        if unknown:
            raise CatalogueError(f"{CATALOGUE_FILE}: {view.view} shows unknown plots {unknown}")


_check_catalogue()
