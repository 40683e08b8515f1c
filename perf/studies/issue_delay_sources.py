"""Where the product path's issue-delay tail comes from: `collobench run` of a one-stage `noop`
pipeline under Poisson load at 2,000 queries/s (5-s windows), in paired rounds with the
runtime's kernel hints off and on (`COLLOBENCH_THREAD_HINTS=0` / `1`,
`stages/runtime/os_threads.py`), the order alternating.

Prints ONE JSON line on stdout (progress on stderr): per variant the median [min, max] over
rounds of issue delay p50/p99 and the share issued more than 100 us late, the paired per-round
difference of p99 (on - off), and, where `perf sched` can record (root, or
perf_event_paranoid <= 1), what held the CPUs while queries waited: for every query issued
more than 100 us late, the time each task was on a CPU between its scheduled and its issue
time, summed per role (the issuer, stage threads, the recorder's writer, the progress
reporter, the samplers, the launcher, the kernel's threads, other processes) and given as a
share of all such time. The runtime names its threads in the kernel, which is what makes
the roles readable. Usage: `python -m perf.studies.issue_delay_sources [ROUNDS]` (default 5, about
3 minutes).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from perf import common, product_path
from perf.common import spread
from perf.loadgen_ours import LATE_ISSUE_NS, noop_pipeline, query_rows, schedule_figures
from stages.runtime.os_threads import HINTS_ENV
from stages.spec.loadgen import loadgen_spec

SCRIPT = "issue_delay_sources"
RATE_QPS = 2000
WINDOW_S = 5.0
VARIANTS = {"hints_off": "0", "hints_on": "1"}
FIGURES = ("issue_delay_p50_us", "issue_delay_p99_us", "issue_delay_over_100us_share")
# A `perf sched timehist` line: time, [cpu], task[tid/pid], wait, sched delay, run time (ms).
TIMEHIST = re.compile(
    r"\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+[\d.]+\s+[\d.]+\s+([\d.]+)"
)
KERNEL_TASKS = ("kworker", "ksoftirqd", "rcu_", "migration", "kdamond", "kcompactd", "khugepaged")


def log(message: str) -> None:
    common.log(SCRIPT, message)


def role(task: str) -> str:
    """The role of a task by its kernel name (the runtime names its threads)."""
    if task in ("issuer", "recorder", "progress") or task.startswith("stage:"):
        return "stage_threads" if task.startswith("stage:") else task
    if task.endswith("-sampler"):
        return "samplers"
    if task == "collobench":
        return "launcher"
    if task.startswith(KERNEL_TASKS):
        return "kernel_threads"
    return "other_processes"


def perf_sched_usable() -> bool:
    if shutil.which("perf") is None:
        return False
    if os.geteuid() == 0:
        return True
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    return paranoid.exists() and int(paranoid.read_text()) <= 1


def blame_ns(timehist: str, scheduled_ns: np.ndarray, issued_ns: np.ndarray) -> dict[str, int]:
    """Per role, nanoseconds on a CPU inside the lateness of every query issued more than
    LATE_ISSUE_NS late (perf's timestamps are CLOCK_MONOTONIC, as the rows')."""
    late = (issued_ns - scheduled_ns) > LATE_ISSUE_NS
    starts, ends = scheduled_ns[late], issued_ns[late]
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    totals: collections.Counter[str] = collections.Counter()
    for line in timehist.splitlines():
        match = TIMEHIST.match(line)
        if match is None or not starts.size:
            continue
        end = round(float(match.group(1)) * 1e9)
        begin = end - int(float(match.group(6)) * 1e6)
        # Late intervals that may overlap [begin, end): those starting before `end`.
        last = int(np.searchsorted(starts, end))
        overlap = np.minimum(ends[:last], end) - np.maximum(starts[:last], begin)
        held = int(overlap[overlap > 0].sum())
        if held:
            totals[role(match.group(3).strip())] += held
    return dict(totals)


def one_window(variant: str, work: Path, record: bool) -> dict[str, Any]:
    """One 5-s window through `collobench run` with the hints `variant`; its figures."""
    loadgen = loadgen_spec(type="server", rate=RATE_QPS, duration_s=WINDOW_S, timeout_s=90)
    document = product_path.spec_document("noop-sources", [noop_pipeline("noop", loadgen)])
    data = work / "sched.data"
    wrapper = ["perf", "sched", "record", "-k", "CLOCK_MONOTONIC", "-o", str(data), "--"]
    run_dir = product_path.run_spec(
        document, work, "noop", wrapper if record else None, {HINTS_ENV: VARIANTS[variant]}
    )
    rows = query_rows(product_path.measured_queries(run_dir, "noop"))
    kept = schedule_figures(rows)
    figures: dict[str, Any] = {name: kept[name] for name in FIGURES}
    if record:
        issued_mask = rows["status"] != "dropped"
        scheduled = rows["scheduled_ns"][issued_mask]
        issued = rows["issued_ns"][issued_mask]
        timehist = subprocess.run(
            ["perf", "sched", "timehist", "-i", str(data)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        held = blame_ns(timehist, scheduled.astype(np.int64), issued.astype(np.int64))
        total = sum(held.values()) or 1
        figures["cpu_held_during_lateness_share"] = {
            name: round(value / total, 3) for name, value in sorted(held.items())
        }
    log(f"{variant}: {figures}")
    return figures


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    record = perf_sched_usable()
    measured: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="collobench-sources-") as directory:
        for round_index in range(rounds):
            order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                place = Path(directory) / f"r{round_index}-{variant}"
                measured[variant].append(one_window(variant, place, record))
    report: dict[str, Any] = {
        "script": SCRIPT,
        "rate_qps": RATE_QPS,
        "window_s": WINDOW_S,
        "rounds": rounds,
        "path": "collobench run (subprocess)",
        "perf_sched": record,
    }
    for variant, rows in measured.items():
        report[variant] = {name: spread([row[name] for row in rows], 5) for name in FIGURES}
        if record:
            roles = sorted({name for row in rows for name in row["cpu_held_during_lateness_share"]})
            report[variant]["cpu_held_during_lateness_share"] = {
                name: spread(
                    [row["cpu_held_during_lateness_share"].get(name, 0.0) for row in rows], 3
                )
                for name in roles
            }
    report["issue_delay_p99_on_minus_off_us"] = spread(
        [
            on["issue_delay_p99_us"] - off["issue_delay_p99_us"]
            for on, off in zip(measured["hints_on"], measured["hints_off"], strict=True)
        ]
    )
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
