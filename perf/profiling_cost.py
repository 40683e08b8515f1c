"""Cost of operator profiling (`profile_every`): per profiled query (ms) and per unprofiled
query (ns), on a small CNN (LeNet-sized, 1x28x28, batch 1, one thread) on the CPU.

Prints ONE JSON line. Unprofiled: `with profiler.around(query): pass` against an empty loop,
with profiling off (every = 0) and on but not sampled (every = 10**9). Profiled: the median
time of one query's model call wrapped in `around` with every = 1 (profiler start, the call,
stop, events turned into rows, rows handed to the sink) against the same call unwrapped.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from perf.common import BackgroundLoad, log, report_header, wait_for_quiet
from stages.library.core.profiling import OperatorProfiler
from stages.runtime.query import Query
from stages.runtime.stage import StageContext

SCRIPT = "profiling_cost"
LOOP = 1_000_000
ROUNDS = 5
CALLS = 200


def unprofiled_ns(every: int) -> float:
    """ns that `with profiler.around(query)` adds to a query not sampled (median of rounds)."""
    profiler = OperatorProfiler(every, StageContext(stage_id="cost"))
    query = Query(0, 0, stage_count=1)
    around = profiler.around
    costs = []
    for _ in range(ROUNDS):
        started = time.perf_counter_ns()
        for _ in range(LOOP):
            with around(query):
                pass
        wrapped = time.perf_counter_ns() - started
        started = time.perf_counter_ns()
        for _ in range(LOOP):
            pass
        bare = time.perf_counter_ns() - started
        costs.append((wrapped - bare) / LOOP)
    return statistics.median(costs)


def profiled_ms() -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 5 * 5, 10),
    ).eval()
    images = torch.randn(1, 1, 28, 28)
    rows: list[int] = []
    context = StageContext(stage_id="cnn", write_rows=lambda table, batch: rows.append(len(batch)))
    profiler = OperatorProfiler(1, context)  # warm-up (kineto start-up) happens here
    query = Query(0, 0, stage_count=1)
    plain, profiled = [], []
    with torch.inference_mode():
        for _ in range(20):
            model(images)
        for _ in range(CALLS):  # interleaved, so drift hits both sides alike
            started = time.perf_counter_ns()
            model(images)
            plain.append(time.perf_counter_ns() - started)
            started = time.perf_counter_ns()
            with profiler.around(query):
                model(images)
            profiled.append(time.perf_counter_ns() - started)
    plain_ms = statistics.median(plain) / 1e6
    profiled_ms_ = statistics.median(profiled) / 1e6
    return {
        "model_call_ms": round(plain_ms, 3),
        "profiled_call_ms": round(profiled_ms_, 3),
        "per_profiled_query_ms": round(profiled_ms_ - plain_ms, 3),
        "profiled_p90_ms": round(sorted(profiled)[int(0.9 * CALLS)] / 1e6, 3),
        "rows_per_profiled_query": statistics.median(rows),
        "torch": torch.__version__,
    }


def main() -> None:
    waited = wait_for_quiet(SCRIPT, 30)
    with BackgroundLoad() as load:
        log(SCRIPT, "unprofiled queries")
        off_ns = unprofiled_ns(0)
        not_sampled_ns = unprofiled_ns(10**9)
        log(SCRIPT, "profiled queries")
        profiled = profiled_ms()
    report = report_header(SCRIPT, "cpu", waited, {"during": load.pct})
    report.update(
        {
            "per_unprofiled_query_ns": {
                "off": round(off_ns, 1),
                "on_not_sampled": round(not_sampled_ns, 1),
            },
            **profiled,
        }
    )
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
