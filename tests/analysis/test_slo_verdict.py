"""The three-valued SLO verdict (issue 19): met by LoadGen's early-stopping rule, missed by its
mirror binomial test, else undecided; from counts, from latencies and from a run directory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analysis.reports.early_stopping import slo_verdict
from analysis.reports.headline_figures import headline_metrics, summarize_run
from stages.contracts.slo_verdict import max_passing_over_slo, slo_verdict_by_counts
from tests.analysis.runs import SLO_CASES, SLO_MS, slo_run


def _binomial_tail(queries: int, over_slo: int, share: float = 0.01) -> float:
    """P[Bin(queries, share) >= over_slo], summed term by term in log space (no shared code)."""
    log_terms = [
        math.lgamma(queries + 1)
        - math.lgamma(k + 1)
        - math.lgamma(queries - k + 1)
        + k * math.log(share)
        + (queries - k) * math.log1p(-share)
        for k in range(over_slo, queries + 1)
    ]
    return sum(math.exp(term) for term in log_terms)


@pytest.mark.parametrize(("expected", "counts"), [(v, c) for v, c in SLO_CASES.items()])
def test_the_issues_cases_by_counts(expected: str, counts: tuple[int, int]) -> None:
    assert slo_verdict_by_counts(*counts) == expected


@pytest.mark.parametrize(("expected", "counts"), [(v, c) for v, c in SLO_CASES.items()])
def test_the_issues_cases_by_latencies(expected: str, counts: tuple[int, int]) -> None:
    """The same counts as latencies: over the SLO by a hair, or failed (+inf)."""
    queries, over = counts
    failed = over // 2
    latencies = [SLO_MS + 0.001] * (over - failed) + [math.inf] * failed
    latencies += [SLO_MS] * (queries - over)  # at the SLO is within it
    assert slo_verdict(latencies, SLO_MS) == expected


def test_missed_starts_where_the_binomial_tail_drops_below_one_percent() -> None:
    """At N = 340 the verdict turns from undecided to missed at the first T whose tail
    P[Bin(340, 0.01) >= T] is under 0.01 (T = 9, computed here independently)."""
    first_missed = next(t for t in range(341) if _binomial_tail(340, t) < 0.01)
    assert first_missed == 9
    assert slo_verdict_by_counts(340, first_missed - 1) == "undecided"
    assert slo_verdict_by_counts(340, first_missed) == "missed"
    assert slo_verdict_by_counts(340, 340) == "missed"


def test_met_starts_at_loadgens_minimum_and_the_two_never_overlap() -> None:
    """With none over, LoadGen's rule needs ceil(log 0.01 / log 0.99) = 459 queries; below it
    nothing is proven. At every size, the most over-SLO queries still met lie below the first
    count missed (the independent tail's 1% crossing): met, undecided, missed, in that order."""
    needed = math.ceil(math.log(0.01) / math.log(0.99))
    assert slo_verdict_by_counts(needed, 0) == "met"
    assert slo_verdict_by_counts(needed - 1, 0) == "undecided"
    assert slo_verdict_by_counts(0, 0) == "undecided"
    for queries in (100, 459, 1000, 5000):
        first_missed = next(t for t in range(queries + 1) if _binomial_tail(queries, t) < 0.01)
        assert slo_verdict_by_counts(queries, first_missed) == "missed"
        assert slo_verdict_by_counts(queries, first_missed - 1) != "missed"
        most_met = max_passing_over_slo(queries)
        assert most_met < first_missed
        if most_met >= 0:
            assert slo_verdict_by_counts(queries, most_met) == "met"
            assert slo_verdict_by_counts(queries, most_met + 1) != "met"


def test_a_run_directory_reads_the_same_verdicts(tmp_path: Path) -> None:
    """Crafted queries.parquet rows: the summary counts every measured query (warm-up
    excluded, failures over the SLO) and gives each case its verdict."""
    run_dir = slo_run(tmp_path).write()
    summaries = {s.pipeline: s for s in summarize_run(run_dir)}
    assert set(summaries) == set(SLO_CASES)
    for expected, (queries, over) in SLO_CASES.items():
        summary = summaries[expected]
        assert (summary.measured, summary.over_slo) == (queries, over), expected
        assert summary.failed == over // 3  # one over-SLO query in three failed
        assert (summary.slo_ms, summary.slo_verdict) == (SLO_MS, expected)
        metrics = headline_metrics(summary)
        assert metrics["queries_over_slo"] == over and metrics["slo_ms"] == SLO_MS
        assert (metrics["slo_met"], metrics["slo_missed"]) == (
            float(expected == "met"),
            float(expected == "missed"),
        )


def test_no_slo_no_verdict(tmp_path: Path) -> None:
    run = slo_run(tmp_path, {"p": (500, 0)})
    run.slo_ms.clear()
    (summary,) = summarize_run(run.write())
    assert (summary.over_slo, summary.slo_verdict) == (None, None)
    assert not {"slo_ms", "queries_over_slo", "slo_met", "slo_missed"} & set(
        headline_metrics(summary)
    )
