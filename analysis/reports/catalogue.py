"""The report catalogue: which warehouse views the reports show, each with its row order,
titles and the columns each report prints (entry types, number formats and the checks:
analysis/reports/report_entries.py; the views not reported per run:
analysis/reports/views_not_per_run.py).

`collobench report` and the tables after `collobench run` (stages.cli), report.md
(analysis.reports.report_file), the Dagster report assets (bench_defs.assets.reports) and the
capacity tables (analysis.capacity.warehouse_tables) read it. A column named here that a view's SQL
lacks, a view named here that the warehouse lacks, or a warehouse view named nowhere here is a
ReportCatalogueError, never a silent drop. No DuckDB, pandas or matplotlib: the CLI and Dagster
import it at start.
"""

from __future__ import annotations

from analysis.reports.report_entries import (
    Asset,
    MarkdownColumns,
    Plot,
    ReportCatalogueRules,
    ReportView,
    Section,
    names,
)
from analysis.reports.views_not_per_run import (
    BY_CAPACITY_VIEW,
    CAPACITY_CATALOGUE,
    NOT_REPORTED,
    NOT_REPORTED_FILE,
)

CATALOGUE_FILE = "analysis/reports/catalogue.py"

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

# The views shown after `collobench run` (each with its after_run_title), in that order: what
# the run summary does not already say.
AFTER_RUN: tuple[str, ...] = names(
    "accuracy training tokens token_goodput perf_per_watt energy_split contention "
    "contention_by_run interference"
)

BY_VIEW: dict[str, ReportView] = {entry.view: entry for entry in CATALOGUE}

RULES = ReportCatalogueRules(
    CATALOGUE_FILE, NOT_REPORTED_FILE, BY_VIEW, BY_CAPACITY_VIEW, NOT_REPORTED, AFTER_RUN, PLOTS
)
entry = RULES.entry
check_columns = RULES.check_columns
check_views = RULES.check_views
RULES.check_consistency(len(CATALOGUE), len(CAPACITY_CATALOGUE))
