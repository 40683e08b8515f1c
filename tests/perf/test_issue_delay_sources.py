"""perf/studies/issue_delay_sources.py's account of who held the CPUs while queries waited: each
`perf sched timehist` span is cut to the late queries' intervals and summed per role."""

from __future__ import annotations

import numpy as np

from perf.studies.issue_delay_sources import blame_ns, role

# time, [cpu], task[tid/pid], wait, sched delay, run time (ms): the task ran for `run time`
# up to `time` (seconds, CLOCK_MONOTONIC).
TIMEHIST = """\
           time    cpu  task name                       wait time  sch delay   run time
--------------- ------  ------------------------------  ---------  ---------  ---------
     10.000300 [0000]  recorder[100/90]                      0.000      0.000      0.300
     10.000400 [0001]  stage:nothing[101/90]                 0.000      0.000      0.100
     10.001000 [0000]  kworker/0:1-eve[7]                    0.000      0.000      0.500
     10.002000 [0001]  host-sampler[200]                     0.000      0.000      0.050
"""


def test_each_span_counts_only_inside_late_intervals() -> None:
    # Query 1: scheduled 10.000100, issued 10.000700 (600 us late); query 2 on time.
    scheduled = np.array([10_000_100_000, 10_001_900_000], dtype=np.int64)
    issued = np.array([10_000_700_000, 10_001_910_000], dtype=np.int64)
    held = blame_ns(TIMEHIST, scheduled, issued)
    # recorder ran 10.000000-10.000300: 200 us inside; the stage 10.000300-10.000400: all
    # 100 us; the kworker 10.000500-10.001000: 200 us; the sampler's span meets only the
    # query issued 10 us late, which is not late.
    assert held == {"recorder": 200_000, "stage_threads": 100_000, "kernel_threads": 200_000}


def test_roles_follow_the_kernel_names_the_runtime_gives() -> None:
    names = ["issuer", "recorder", "progress", "stage:a#1", "gpu0-sampler", "collobench"]
    assert [role(name) for name in names] == [
        "issuer",
        "recorder",
        "progress",
        "stage_threads",
        "samplers",
        "launcher",
    ]
    assert role("rcu_preempt") == "kernel_threads"
    assert role("memfd:sealed-91") == "other_processes"
