"""The load of perf/analysis_speed.py paired with the same load by another checkout's code.

Each round loads every run into a fresh warehouse twice, once with this checkout's code and
once with the baseline's (a worktree of an earlier commit, `--baseline DIR`), each in a fresh
process (perf/load_child.py run with PYTHONPATH set to that tree), the order alternating
(ours first, then theirs first, ...) so a machine that speeds up or slows down over the rounds
favours neither. The figure is the per-round ratio ours / baseline of wall and of CPU
seconds, quoted as median [min, max] over the rounds: on a shared machine other processes
stretch the wall time of both sides of a round alike, and CPU seconds hardly at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from perf.common import REPO_ROOT, log, spread

SCRIPT = "analysis_speed"
CHILD = Path(__file__).with_name("load_child.py")


def load_once(tree: Path, db: Path, run_dirs: list[Path]) -> dict[str, Any]:
    """One whole-process load of `run_dirs` into a fresh `db` with `tree`'s code."""
    db = db.resolve()  # the child runs in `tree`
    for suffix in ("", ".wal", ".lock"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    environment = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    completed = subprocess.run(
        [sys.executable, str(CHILD), str(db), *(str(path.resolve()) for path in run_dirs)],
        capture_output=True,
        text=True,
        cwd=tree,
        env=environment,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"load with {tree} failed:\n{completed.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    result["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return result


def paired_loads(work: Path, run_dirs: list[Path], baseline: Path, rounds: int) -> dict[str, Any]:
    """`rounds` interleaved pairs of loads, ours and `baseline`'s; their figures and ratios."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for index in range(rounds):
        order = [(REPO_ROOT, ours), (baseline, theirs)]
        for tree, results in order if index % 2 == 0 else order[::-1]:
            results.append(load_once(tree, work / "paired.duckdb", run_dirs))
        log(
            SCRIPT,
            f"round {index + 1}/{rounds}: ours {ours[-1]['load_s']} s, "
            f"baseline {theirs[-1]['load_s']} s",
        )
    return {
        "baseline": str(baseline),
        "baseline_commit": _commit(baseline),
        "rounds": rounds,
        "method": "whole-process loads, ours and the baseline's alternating (ABBA...); "
        "median [min, max] of the per-round ratios",
        "load_s": spread([result["load_s"] for result in ours]),
        "baseline_load_s": spread([result["load_s"] for result in theirs]),
        "cpu_s": spread([result["cpu_s"] for result in ours]),
        "baseline_cpu_s": spread([result["cpu_s"] for result in theirs]),
        "wall_ratio": spread(_ratios(ours, theirs, "load_s"), 3),
        "cpu_ratio": spread(_ratios(ours, theirs, "cpu_s"), 3),
        "loadavg_1m": spread([result["loadavg_1m"] for result in ours + theirs]),
        "steps_last_round": ours[-1]["steps"],
    }


def _ratios(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], key: str) -> list[float]:
    return [a[key] / b[key] for a, b in zip(ours, theirs, strict=True) if b[key]]


def _commit(tree: Path) -> str | None:
    completed = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )
    return completed.stdout.strip() or None
