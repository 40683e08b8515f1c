"""The capacity asset's checks on crafted results, and its partition keys (no Dagster run)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from bench_defs.capacity_checks import bracket_check, monotone_check
from bench_defs.capacity_keys import CapacityKeyError, parse_capacity_key, region_keys, search_id_of
from stages.contracts.capacity_files import CapacityResult


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
        ("infeasible", (0.0, 1.0), True, None, "infeasible: even the lowest rate"),
        ("ceiling", (400.0, None), True, None, "ceiling: met the SLO up to the measured"),
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
