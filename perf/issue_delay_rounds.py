"""Issue delay at 2,000 queries/s, paired rounds: CPython's automatic garbage collection
against `IdleCollector` (collections at idle moments), and that with a real pause between the
recorder writer's conversion slices instead of `sleep(0)`.

Prints ONE JSON line on stdout (progress on stderr): per variant the median [min, max] over
rounds of the issue delay p50/p99 and latency p99 (us), and the paired per-round difference of
the p99 against the base. Rounds alternate the variants' order. Each window is 5 s of Poisson
arrivals into one `noop` stage, run in this process with Parquet recording, as in
`perf/loadgen_accuracy.py` (whose `ours_server` it calls). Usage: `python
perf/issue_delay_rounds.py [ROUNDS]` (default 5, about 2 minutes).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# perf/ is first on sys.path when run as `python perf/issue_delay_rounds.py`.
import loadgen_accuracy

import stages.runtime.loadgen.open_loop as open_loop
import stages.runtime.recorder as recorder
from stages.runtime.loadgen.idle_gc import IdleCollector

RATE_QPS = 2000
WINDOW_S = 5.0
FIGURES = ("issue_delay_p50_us", "issue_delay_p99_us", "latency_p99_us")


class AutomaticCollection:
    """The base: no IdleCollector, CPython collects wherever the threshold is crossed."""

    passes = forced = 0

    def __enter__(self) -> AutomaticCollection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def before_sleep(self, next_issue_ns: int, wait_idle: Any) -> None:
        pass


# variant -> (collector class, recorder slice rows, pause between slices in s)
VARIANTS: dict[str, tuple[type[Any], int, float]] = {
    "base": (AutomaticCollection, 512, 0.0),
    "idle_gc": (IdleCollector, 512, 0.0),
    "idle_gc+pause": (IdleCollector, recorder.SLICE_ROWS, recorder.SLICE_PAUSE_S),
}


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    measured: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as work:
        for round_index in range(rounds):
            order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                collector, recorder.SLICE_ROWS, recorder.SLICE_PAUSE_S = VARIANTS[variant]
                setattr(open_loop, "IdleCollector", collector)  # noqa: B010 - the variant under test
                figures = loadgen_accuracy.ours_server(
                    RATE_QPS, WINDOW_S, Path(work) / f"{variant}{round_index}"
                )
                measured[variant].append(figures)
    result: dict[str, Any] = {"benchmark": "issue_delay_rounds", "rate_qps": RATE_QPS}
    result["rounds"] = rounds
    for variant, rows in measured.items():
        result[variant] = {name: spread([row[name] for row in rows]) for name in FIGURES}
        if variant != "base":
            result[variant]["paired_p99_diff_us"] = spread(
                [
                    row["issue_delay_p99_us"] - base["issue_delay_p99_us"]
                    for row, base in zip(rows, measured["base"], strict=True)
                ]
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
