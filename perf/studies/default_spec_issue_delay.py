"""Issue delay of the spec a user writes without tuning, through `collobench run`, against the
spec the other perf scripts run, with one difference between them toggled at a time.

The default spec is one `noop` pipeline under a Poisson (`server`) load at 2,000 queries/s and
nothing else: the loadgen's default 10-s window, host telemetry and calibration on, no
placement, solo baseline, the runtime's kernel hints on. The perf spec is the one
`perf/loadgen_accuracy.py` and `perf/studies/issue_delay_sources.py` run through the same command (a
5-s window). The toggles change one field of the default spec (or the hints' environment
variable) each, so a paired difference names what a difference costs.

Prints ONE JSON line on stdout (progress on stderr): per variant the median [min, max] over
rounds of issue delay p50/p99 and the share of queries issued more than 100 us late, as
`collobench run` reports them (the manifest's `summary`, the `latency` view: warm-up
excluded, LoadGen's percentile); per variant the paired per-round difference to the default
spec; whether the default spec met p50 <= 10 us and p99 <= 120 us (median of rounds); the
load average before and after and the CPU other processes used. Rounds run every variant once,
the order reversed every other round. Usage:
`python -m perf.studies.default_spec_issue_delay [--rounds N] [--variants a,b,...]` (default 3
rounds of every variant, about 25 s a run on a quiet machine, up to a minute under load).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf import common, product_path
from perf.common import BackgroundLoad, spread
from stages.runtime.os_threads import HINTS_ENV

SCRIPT = "default_spec_issue_delay"
RATE_QPS = 2000
TARGET_P50_US = 10.0
TARGET_P99_US = 120.0
FIGURES = ("issue_delay_p50_us", "issue_delay_p99_us", "issue_delay_over_100us_share")
PERF_WINDOW_S = 5.0

DEFAULT_SPEC: dict[str, Any] = {
    "name": "noop-2k",
    "pipelines": [
        {
            "name": "noop",
            "loadgen": {"type": "server", "rate": RATE_QPS},
            "stages": [{"id": "nothing", "type": "noop"}],
        }
    ],
}
"""What a user writes for a 2,000 q/s Poisson `noop` benchmark: every other field defaulted."""


def perf_spec() -> dict[str, Any]:
    """The spec `perf/loadgen_accuracy.py` runs through `collobench run` (its `ours_cli`)."""
    return {
        "name": "noop-cli",
        "seed": 0,
        "pipelines": [
            {
                "name": "noop",
                "loadgen": {
                    "type": "server",
                    "rate": RATE_QPS,
                    "duration_s": PERF_WINDOW_S,
                    "timeout_s": PERF_WINDOW_S + 60,
                },
                "stages": [{"id": "nothing", "type": "noop"}],
            }
        ],
    }


def _changed(change: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
    """A variant's spec: the default spec with `change` applied to a copy."""

    def document() -> dict[str, Any]:
        spec = copy.deepcopy(DEFAULT_SPEC)
        change(spec)
        return spec

    return document


def _telemetry(spec: dict[str, Any], part: str) -> None:
    spec.setdefault("telemetry", {})[part] = {"enabled": False}


def _window_5s(spec: dict[str, Any]) -> None:
    spec["pipelines"][0]["loadgen"]["duration_s"] = PERF_WINDOW_S


def _pinned(spec: dict[str, Any]) -> None:
    last = (os.cpu_count() or 1) - 1
    spec["pipelines"][0]["placement"] = {"cpus": [last]}


# name -> (the spec, the environment on top of this process's): the default spec, the perf
# spec, and the default spec with one difference toggled.
VARIANTS: dict[str, tuple[Callable[[], dict[str, Any]], dict[str, str]]] = {
    "default": (lambda: copy.deepcopy(DEFAULT_SPEC), {}),
    "perf_spec": (perf_spec, {}),
    "window_5s": (_changed(_window_5s), {}),
    "hints_off": (lambda: copy.deepcopy(DEFAULT_SPEC), {HINTS_ENV: "0"}),
    "host_telemetry_off": (_changed(lambda spec: _telemetry(spec, "host")), {}),
    "calibration_off": (_changed(lambda spec: _telemetry(spec, "calibration")), {}),
    "pinned_one_cpu": (_changed(_pinned), {}),
}


def log(message: str) -> None:
    common.log(SCRIPT, message)


def summary_figures(run_dir: Path) -> dict[str, float]:
    """The issue-delay figures `collobench run` wrote into the manifest's summary (solo phase
    of trial 0, the one pipeline)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (result,) = [r for r in manifest["results"] if r["trial"] == 0 and r["phase"] == "solo"]
    summary = result["summary"]
    return {name: float(summary[name]) for name in FIGURES}


def one_run(variant: str, work: Path) -> dict[str, float]:
    document, environment = VARIANTS[variant]
    os.sync()  # the previous run's files are written back now, not inside this window
    run_dir = product_path.run_spec(document(), work, variant, environment=environment)
    figures = summary_figures(run_dir)
    log(f"{variant}: {figures}")
    return figures


def paired_rounds(variants: list[str], rounds: int, work: Path) -> dict[str, list[dict]]:
    measured: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_index in range(rounds):
        order = variants if round_index % 2 == 0 else variants[::-1]
        for variant in order:
            measured[variant].append(one_run(variant, work / f"r{round_index}-{variant}"))
    return measured


def report(measured: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each variant's spread, its paired difference to the default spec, and the targets."""
    result: dict[str, Any] = {}
    for variant, rows in measured.items():
        result[variant] = {
            name: spread([row[name] for row in rows], 5 if "share" in name else 2)
            for name in FIGURES
        }
        if variant != "default" and "default" in measured:
            for name in ("issue_delay_p50_us", "issue_delay_p99_us"):
                differences = [
                    row[name] - base[name]
                    for row, base in zip(rows, measured["default"], strict=True)
                ]
                result[variant][f"{name.removesuffix('_us')}_minus_default_us"] = spread(
                    differences
                )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds (default 3)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, from: {', '.join(VARIANTS)} (default: all)",
    )
    args = parser.parse_args()
    variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    load_before = [round(value, 2) for value in os.getloadavg()]
    with (
        tempfile.TemporaryDirectory(prefix="collobench-default-spec-") as directory,
        BackgroundLoad() as background,
    ):
        measured = paired_rounds(variants, args.rounds, Path(directory))
    figures = report(measured)
    default = figures.get("default")
    met = (
        None
        if default is None
        else {
            "issue_delay_p50_us": default["issue_delay_p50_us"]["median"] <= TARGET_P50_US,
            "issue_delay_p99_us": default["issue_delay_p99_us"]["median"] <= TARGET_P99_US,
        }
    )
    line = {
        **common.report_header(SCRIPT, "full", 0.0, {"rounds": background.pct}),
        "rate_qps": RATE_QPS,
        "rounds": args.rounds,
        "path": "collobench run (subprocess), figures from the manifest summary",
        "method": "median [min, max] over rounds; each round runs every variant once, "
        "the order reversed every other round; differences paired by round",
        "load_average_before": load_before,
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "variants": figures,
        "targets": {
            "issue_delay_p50_us_max": TARGET_P50_US,
            "issue_delay_p99_us_max": TARGET_P99_US,
        },
        "met_by_default_spec": met,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
