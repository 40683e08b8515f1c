"""The capacity asset's checks on crafted results, and its partition keys (no Dagster run)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from bench_defs.capacity.checks import bracket_check, monotone_check, probes_markdown
from bench_defs.capacity.keys import CapacityKeyError, parse_capacity_key, region_keys, search_id_of
from stages.contracts.capacity_files import CapacityResult, Verdict
from tests.analysis.capacity_dirs import UNDECIDABLE_DETAIL, Probe, Search, slow_search


def _crafted(stop_reason: str, bracket: tuple[float, float | None], **extra: Any) -> CapacityResult:
    document = {
        "search_id": "s",
        "pipeline": "a",
        "slo_ms": 50.0,
        "percentile": 0.99,
        "with": {},
        "certified_qps": bracket[0] or None,
        "estimate_qps": None,
        "estimate_ci95": None,
        "bracket": bracket,
        "probes": [],
        "stop_reason": stop_reason,
        **extra,
    }
    return CapacityResult.model_validate(document)


@pytest.mark.parametrize(
    ("stop_reason", "bracket", "passed", "severity", "said"),
    [
        ("converged", (100.0, 104.0), True, None, "hi/lo = 1.04 <= 1 + 0.05"),
        ("max_probes", (100.0, 104.9), True, None, "hi/lo = 1.049"),
        ("converged", (100.0, 110.0), False, "ERROR", "converged after 0 probes with hi/lo 1.1"),
        ("max_probes", (100.0, 200.0), False, "WARN", "max_probes after 0 probes with hi/lo 2"),
        ("max_probes", (100.0, None), False, "WARN", "hi/lo open (no missed rate)"),
        ("infeasible", (0.0, 1.0), True, None, "infeasible: the SLO is missed even without"),
        ("ceiling", (400.0, None), True, None, "ceiling: met the SLO up to the measured"),
        ("undecidable", (0.0, 6.8), False, "WARN", "undecidable after 0 probes with hi/lo open"),
        ("undecidable", (0.0, None), False, "WARN", ": nothing met down to the lowest rate"),
        ("budget", (100.0, 200.0), False, "WARN", "budget after 0 probes with hi/lo 2"),
        ("budget", (100.0, 200.0), False, "WARN", ": the time budget ran out"),
    ],
)
def test_the_bracket_check_follows_the_stop_reason(
    stop_reason: str,
    bracket: tuple[float, float | None],
    passed: bool,
    severity: str | None,
    said: str,
) -> None:
    check = bracket_check(_crafted(stop_reason, bracket), precision=0.05)
    assert check.passed is passed and said in str(check.description)
    if severity is not None:
        assert check.severity == dg.AssetCheckSeverity[severity]


@pytest.mark.parametrize(("violations", "passed"), [(0, True), (1, True), (2, False)])
def test_the_monotone_check_allows_one_pair_out_of_order(violations: int, passed: bool) -> None:
    crafted = _crafted("converged", (100.0, 104.0), monotonicity_violations=violations)
    assert monotone_check(crafted).passed is passed


def test_partition_keys_parse_back_and_refuse_what_names_no_search() -> None:
    solo = parse_capacity_key("capacity_demo|sleeper")
    assert (solo.spec, solo.pipeline, solo.is_ray, solo.solo_keys()) == (
        "capacity_demo",
        "sleeper",
        False,
        [],
    )
    ray = parse_capacity_key("pair|a+b@ray2of5")
    assert (ray.pipeline, ray.region, ray.ray, ray.rays) == ("a+b", ("a", "b"), 2, 5)
    assert ray.solo_keys() == ["pair|a", "pair|b"] and ray.key == "pair|a+b@ray2of5"
    assert region_keys("pair", "a", "b", 2) == [
        "pair|a", "pair|b", "pair|a+b@ray1of2", "pair|a+b@ray2of2",
    ]  # fmt: skip
    assert search_id_of(ray, "0123456789abcdef") == "pair-a-b-ray2of5-01234567"
    for bad in ("pair", "|a", "pair|", "pair|a+a@ray1of2", "pair|a+b@ray0of2", "pair|a+b@ray3of2",
                "pair|a b", "pair|a+b"):  # fmt: skip
        with pytest.raises(CapacityKeyError, match="capacity partition"):
            parse_capacity_key(bad)


def test_the_bracket_check_gives_the_recorded_evidence() -> None:
    """capacity.json's stop_detail replaces what a stop reason means in general."""
    undecidable = slow_search().result()
    check = bracket_check(undecidable, precision=0.05)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert str(check.description).endswith(f": {UNDECIDABLE_DETAIL}")
    assert check.metadata["stop_detail"].value == UNDECIDABLE_DETAIL
    detail = "the unloaded p99 misses the SLO: one query at a time (459 queries)"
    infeasible = bracket_check(_crafted("infeasible", (0.0, None), stop_detail=detail), 0.05)
    assert infeasible.passed and infeasible.description == f"infeasible: {detail}; no bracket"


def _converged(rates: list[tuple[float, Verdict]], bracket: tuple[float, float | None]) -> Search:
    return Search(
        search_id="near-capacity",
        probes=[Probe(rate, verdict, 3000, 30, 50.0) for rate, verdict in rates],
        certified_qps=bracket[0],
        estimate_qps=None,
        estimate_ci95=None,
        bracket=bracket,
        stop_reason="converged",
    )


@pytest.mark.parametrize(
    ("rates", "bracket", "passed", "said"),
    [
        # the rate just above lo could not pass (undecided), the proven miss is far above
        ([(200.0, "missed"), (100.0, "met"), (104.0, "undecided")], (100.0, 200.0), True,
         "lowest rate not met (104) is within 1 + 0.05 of lo (100), but was not proven missed; "
         "the lowest rate proven missed is 200 (hi/lo = 2)"),
        ([(100.0, "met"), (104.0, "undecided")], (100.0, None), True,
         "no rate above it was proven missed"),
        # nothing not met near lo: a converged search with a wide bracket is still an error
        ([(200.0, "missed"), (100.0, "met"), (150.0, "undecided")], (100.0, 200.0), False,
         "converged after 3 probes with hi/lo 2 > 1 + 0.05"),
    ],
)  # fmt: skip
def test_a_converged_search_passes_on_the_rate_it_stopped_at(
    rates: list[tuple[float, Verdict]],
    bracket: tuple[float, float | None],
    passed: bool,
    said: str,
) -> None:
    """bracket hi is the lowest rate proven missed; the search stops on the lowest not met."""
    check = bracket_check(_converged(rates, bracket).result(), precision=0.05)
    assert check.passed is passed and said in str(check.description)
    if not passed:
        assert check.severity == dg.AssetCheckSeverity.ERROR


def test_the_probe_table_shows_windows_and_probes_that_could_not_pass() -> None:
    table = probes_markdown(slow_search().result()).splitlines()
    assert table[0].startswith("| # | kind | rate | window s | seed |")
    assert (
        table[4] == "| 2 | search | 3.4 | 148.5 | 2 | 40 | 6 | undecided (cannot pass) | 2100 "
        "| 6 over the SLO: more than 459 queries may have and be met |"
    )
    assert table[5].startswith("| 3 | unloaded | 0 | 150 | 3 | 459 | 0 | met | 1300 |")
