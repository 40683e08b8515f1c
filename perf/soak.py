"""The reliability figures of `make soak`: the whole reliability suite (its fast part and the
`soak` marker: fault injection, hostile input, durability, the ten-run soak) and the runtime's
long flatness run, summed up in ONE JSON line on stdout (progress on stderr).

1. `pytest tests/reliability tests/capacity/test_region_real.py
   tests/capacity/test_real_search.py -m "soak or not soak"` (the real-harness capacity search
   and regions too, the served client's 200-stream calibration, the busy stage's wall clock
   under contention, and a CPU hog found in a real history) with
   `COLLOBENCH_RELIABILITY_FIGURES` naming a temporary JSON file, into which the suite's tests
   count what they injected and survived (tests/reliability/figures.py).
2. `python -m perf.stage_overhead --soak --flatness-only` (1M queries through one pipeline with
   recording on: the per-query cost and RSS must stay flat), unless `--no-runtime`.

Targets: pytest passed, every fault injected was survived, every hostile input was rejected
cleanly, no event older than one flush interval lost, no process left behind, the soak's growth
of RSS, open files and threads within the tolerances the soak test records, and the runtime's
per-query cost flat (max/min of tenths <= 1.5; measured again once on a miss). Exits 1 when one
is missed.

    python -m perf.soak                # everything (about 15 min on 2 cores)
    python -m perf.soak --no-runtime   # the reliability suite only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.common import REPO_ROOT, BackgroundLoad, log, report_header, wait_for_quiet

SCRIPT = "soak"
PYTEST_TIMEOUT_S = 3600
RUNTIME_TIMEOUT_S = 1800
TARGET_FLAT_MAX_MIN_RATIO = 1.5


def run_suite(figures_path: Path) -> int:
    """The reliability suite, fast part and soak, its output on our stderr; returns its exit."""
    env = {
        **os.environ,
        "COLLOBENCH_RELIABILITY_FIGURES": str(figures_path),
        "PYTHONPATH": str(REPO_ROOT),
    }
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
        *(
            "tests/reliability",
            "tests/capacity/test_region_real.py",
            "tests/capacity/test_real_search.py",
            "tests/library/served/test_openai_http.py::"
            "test_timestamps_are_within_a_millisecond_of_the_script_at_200_streams",
            "tests/runtime/test_runtime.py::test_busy_does_fixed_work_so_cpu_contention_shows",
            "tests/analysis/test_history_machine.py",
            "-m",
            "soak or not soak",
        ),
    ]
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=sys.stderr,
        stderr=sys.stderr,
        timeout=PYTEST_TIMEOUT_S,
        check=False,
    )
    return completed.returncode


def run_runtime_flatness() -> dict[str, Any]:
    """`python -m perf.stage_overhead --soak --flatness-only`'s figures (its JSON line is on
    our stderr)."""
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "perf.stage_overhead"),
            *("--soak", "--flatness-only"),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        timeout=RUNTIME_TIMEOUT_S,
        check=False,
    )
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        return {"exit": completed.returncode}
    report = json.loads(lines[-1])
    print(lines[-1], file=sys.stderr)
    return {
        "exit": completed.returncode,
        **{key: value for key, value in report.items() if key.startswith(("flat_", "rss_"))},
    }


def total(section: Any) -> int:
    """A figures category as one number: the sum of its integer counters."""
    if not isinstance(section, dict):
        return 0
    return sum(value for value in section.values() if isinstance(value, int))


def soak_within_tolerance(soak: dict[str, Any]) -> bool | None:
    """Every long-lived process's growth within the tolerance the soak test recorded; None when
    the soak did not record its figures (it did not run to the end)."""
    tolerance = soak.get("tolerance")
    if not isinstance(tolerance, dict):
        return None
    for measure in ("rss_growth_mib", "open_files_growth", "threads_growth"):
        growth = soak.get(measure)
        if not isinstance(growth, dict) or measure not in tolerance:
            return None
        if any(value > tolerance[measure] for value in growth.values()):
            return False
    return True


def summarize(
    figures: dict[str, Any], pytest_exit: int, runtime: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON line's figures and the `met` verdicts."""
    injected = figures.get("faults_injected", {})
    survived = figures.get("faults_survived", {})
    tried = total(figures.get("hostile_inputs_tried"))
    rejected = total(figures.get("hostile_inputs_rejected_cleanly"))
    lost = total(figures.get("events_lost_older_than_flush"))
    left = total(figures.get("processes_left"))
    soak = figures.get("soak", {})
    met: dict[str, bool | None] = {
        "pytest_passed": pytest_exit == 0,
        "every_fault_survived": bool(injected)
        and all(survived.get(key, 0) >= count for key, count in injected.items()),
        "hostile_inputs_all_rejected_cleanly": tried > 0 and rejected == tried,
        "no_event_older_than_flush_lost": lost == 0,
        "no_process_left": left == 0,
        "soak_growth_within_tolerance": soak_within_tolerance(soak),
    }
    summary: dict[str, Any] = {
        "faults_injected": injected,
        "faults_survived": survived,
        "hostile_inputs_tried": tried,
        "hostile_inputs_rejected_cleanly": rejected,
        "hostile_inputs_by_kind": figures.get("hostile_inputs_tried", {}),
        "events_lost_older_than_flush": lost,
        "durability": figures.get("durability", {}),
        "processes_left": left,
        "soak": {key: value for key, value in soak.items() if key != "dagster_series"},
        "pytest_exit": pytest_exit,
    }
    if runtime is not None:
        summary["runtime_flatness"] = runtime
        met["runtime_per_query_cost_flat"] = is_flat(runtime)
    return {**summary, "met": met}


def is_flat(runtime: dict[str, Any]) -> bool:
    """The 1M-query run ended cleanly and its slowest tenth cost at most 1.5x its fastest."""
    ratio = runtime.get("flat_max_min_ratio")
    return runtime.get("exit") == 0 and ratio is not None and ratio <= TARGET_FLAT_MAX_MIN_RATIO


def measure_runtime_flatness() -> dict[str, Any]:
    """The flatness run, repeated once (after waiting for a quiet machine) when it missed: a
    stall of the shared 2-core machine can lift one ~2 s tenth by half while a cost that grows
    with the queries recorded shows in both attempts. Both attempts' tenths are reported; the
    verdict is the last one's."""
    attempts = [run_runtime_flatness()]
    if not is_flat(attempts[0]) and attempts[0].get("exit") == 0:
        log(SCRIPT, "runtime flatness missed its target; waiting for quiet and measuring again")
        wait_for_quiet(SCRIPT, 30.0)
        attempts.append(run_runtime_flatness())
    return {
        **attempts[-1],
        "attempts_tenths_us": [a.get("flat_per_query_us_by_tenth") for a in attempts],
        "attempts_max_min_ratio": [a.get("flat_max_min_ratio") for a in attempts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-runtime", action="store_true", help="skip stage_overhead.py --soak")
    parser.add_argument("--figures", type=Path, help="keep the suite's figures JSON here")
    args = parser.parse_args()
    waited_s = wait_for_quiet(SCRIPT, 30.0)
    background: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="collobench-soak-") as directory:
        figures_path = args.figures or Path(directory) / "figures.json"
        figures_path.unlink(missing_ok=True)  # the suite merges into an existing file
        started = time.monotonic()
        with BackgroundLoad() as load:
            pytest_exit = run_suite(figures_path)
        background["reliability_suite"] = load.pct
        log(SCRIPT, f"reliability suite: exit {pytest_exit} in {time.monotonic() - started:.0f} s")
        figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
    runtime = None
    if not args.no_runtime:
        started = time.monotonic()
        with BackgroundLoad() as load:
            runtime = measure_runtime_flatness()
        background["runtime_flatness"] = load.pct
        log(SCRIPT, f"runtime flatness: {time.monotonic() - started:.0f} s")
    mode = "suite" if args.no_runtime else "full"
    report = {
        **report_header("soak", mode, waited_s, background),
        **summarize(figures, pytest_exit, runtime),
    }
    print(json.dumps(report), flush=True)
    sys.exit(0 if all(value is True for value in report["met"].values()) else 1)


if __name__ == "__main__":
    main()
