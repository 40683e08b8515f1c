"""Issue delay at 2,000 queries/s, paired rounds of the hot-path changes one on top of the
other: CPython's automatic garbage collection (base), `IdleCollector` (collections at idle
moments), a real pause between the recorder writer's conversion slices instead of `sleep(0)`,
and smaller slices that keep clear of the issuer's announced next issue (what main runs).

Prints ONE JSON line on stdout (progress on stderr): per variant the median [min, max] over
rounds of the issue delay p50/p99 and latency p99 (us), and the paired per-round difference of
the p99 against the base and against the variant before it. Rounds alternate the variants'
order. Each window is 5 s of Poisson arrivals into one `noop` stage, run in this process with
Parquet recording, as in `perf/loadgen_accuracy.py` (whose `ours_server`, in
`perf/loadgen_ours.py`, it calls). Usage: `python -m perf.studies.issue_delay_rounds [ROUNDS]`
(default 5, about 2 minutes).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import stages.runtime.loadgen.open_loop as open_loop
import stages.runtime.row_slices as row_slices
from perf import loadgen_accuracy, loadgen_ours
from perf.common import spread
from stages.runtime.loadgen.idle_gc import IdleCollector

RATE_QPS = 2000
WINDOW_S = 5.0
FIGURES = loadgen_accuracy.ROUND_FIGURES


class AutomaticCollection:
    """The base: no IdleCollector, CPython collects wherever the threshold is crossed."""

    passes = forced = 0

    def __enter__(self) -> AutomaticCollection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def before_sleep(self, next_issue_ns: int, wait_idle: Any) -> None:
        pass


NO_GAP_WAIT = {"ISSUE_CLEAR_BEFORE_NS": 0, "ISSUE_CLEAR_AFTER_NS": 0}
# variant -> (collector class, `row_slices` settings of the recorder's writer); each variant
# adds one change.
VARIANTS: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "base": (AutomaticCollection, {"SLICE_ROWS": 512, "SLICE_PAUSE_S": 0.0, **NO_GAP_WAIT}),
    "idle_gc": (IdleCollector, {"SLICE_ROWS": 512, "SLICE_PAUSE_S": 0.0, **NO_GAP_WAIT}),
    "idle_gc+pause": (
        IdleCollector,
        {"SLICE_ROWS": 128, "SLICE_PAUSE_S": row_slices.SLICE_PAUSE_S, **NO_GAP_WAIT},
    ),
    # What main runs: smaller slices, none started just before an announced issue.
    "idle_gc+pause+issue_gap": (
        IdleCollector,
        {
            name: getattr(row_slices, name)
            for name in (
                "SLICE_ROWS",
                "SLICE_PAUSE_S",
                "ISSUE_CLEAR_BEFORE_NS",
                "ISSUE_CLEAR_AFTER_NS",
            )
        },
    ),
}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    measured: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as work:
        for round_index in range(rounds):
            order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                collector, settings = VARIANTS[variant]
                for name, value in settings.items():
                    setattr(row_slices, name, value)
                setattr(open_loop, "IdleCollector", collector)  # noqa: B010 - the variant under test
                figures = loadgen_ours.ours_server(
                    RATE_QPS, WINDOW_S, Path(work) / f"{variant}{round_index}"
                )
                measured[variant].append(figures)
    result: dict[str, Any] = {"benchmark": "issue_delay_rounds", "rate_qps": RATE_QPS}
    result["rounds"] = rounds
    previous: list[dict[str, Any]] | None = None
    for variant, rows in measured.items():
        result[variant] = {name: spread([row[name] for row in rows]) for name in FIGURES}
        if previous is not None:
            for against, other in (("base", measured["base"]), ("previous", previous)):
                result[variant][f"paired_p99_diff_vs_{against}_us"] = spread(
                    [
                        row["issue_delay_p99_us"] - before["issue_delay_p99_us"]
                        for row, before in zip(rows, other, strict=True)
                    ]
                )
        previous = rows
    print(json.dumps(result))


if __name__ == "__main__":
    main()
