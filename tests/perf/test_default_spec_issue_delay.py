"""perf/studies/default_spec_issue_delay.py: every variant is a valid spec that differs from the
default spec in the one thing it names, and the paired differences pair by round."""

from __future__ import annotations

from typing import Any

from perf.studies.default_spec_issue_delay import DEFAULT_SPEC, VARIANTS, report
from stages.spec.models import BenchmarkSpec


def _flat(document: dict[str, Any]) -> dict[str, Any]:
    """The normal form of a spec document, flattened to dotted keys."""
    dumped = BenchmarkSpec.model_validate(document).model_dump(mode="json")

    def walk(node: Any, prefix: str) -> dict[str, Any]:
        if isinstance(node, dict):
            return {
                k: v
                for key, value in node.items()
                for k, v in walk(value, f"{prefix}{key}.").items()
            }
        if isinstance(node, list) and node and isinstance(node[0], dict):
            return {
                k: v for i, item in enumerate(node) for k, v in walk(item, f"{prefix}{i}.").items()
            }
        return {prefix.rstrip("."): node}

    return walk(dumped, "")


def test_each_variant_changes_one_thing_of_the_default_spec() -> None:
    default = _flat(DEFAULT_SPEC)
    assert default["pipelines.0.loadgen.duration_s"] == 10.0  # the loadgen's own default
    changed = {}
    for name, (document, environment) in VARIANTS.items():
        flat = _flat(document())
        changed[name] = (
            # The default calibration is left out of the normal form: a key only one side has.
            sorted(k for k in flat.keys() | default.keys() if flat.get(k) != default.get(k)),
            environment,
        )
    assert changed["default"] == ([], {})
    assert changed["hints_off"] == ([], {"COLLOBENCH_THREAD_HINTS": "0"})
    assert changed["window_5s"] == (["pipelines.0.loadgen.duration_s"], {})
    assert changed["host_telemetry_off"] == (["telemetry.host.enabled"], {})
    assert changed["calibration_off"][0] == [
        "telemetry.calibration.chunk_ms",
        "telemetry.calibration.duration_ms",
        "telemetry.calibration.enabled",
    ]
    assert changed["pinned_one_cpu"][0] == ["pipelines.0.placement.cpus"]
    # The perf scripts' spec: a 5-s window and the timeout that goes with it.
    assert changed["perf_spec"][0] == [
        "name",
        "pipelines.0.loadgen.duration_s",
        "pipelines.0.loadgen.timeout_s",
    ]


def test_differences_pair_each_round_with_the_same_rounds_default() -> None:
    def row(p50: float, p99: float) -> dict[str, float]:
        return {
            "issue_delay_p50_us": p50,
            "issue_delay_p99_us": p99,
            "issue_delay_over_100us_share": 0.0,
        }

    measured = {
        "default": [row(5, 100), row(9, 300), row(6, 90)],
        "hints_off": [row(4, 130), row(8, 320), row(7, 150)],
    }
    figures = report(measured)
    assert figures["default"]["issue_delay_p99_us"] == {"median": 100, "min": 90, "max": 300}
    # Round by round: +30, +20, +60 (unpaired medians would give 150 - 100 = +50).
    assert figures["hints_off"]["issue_delay_p99_minus_default_us"] == {
        "median": 30,
        "min": 20,
        "max": 60,
    }
    assert figures["hints_off"]["issue_delay_p50_minus_default_us"]["median"] == -1
