"""What each remaining piece of the hot path costs: the figures behind the README's
"Performance" section.

Prints ONE JSON line on stdout (progress on stderr). Measured:

1. A query's way through a 10-stage `noop` chain (closed loop, one client, Parquet recording
   on), every thread pinned to one core, under each scheduling policy (`other`, `batch`), read
   back from the recorded rows as medians over the measured queries: issue -> first stage's
   start (the issuing thread's work after its put, then the switch), a stage's finish -> the
   next stage's start (the stage loop's bookkeeping, the channel and the switch: one hand-off),
   a `noop` stage's own run, and completion -> next issue (the completing thread issues it).
   Beside them, in the same rounds (alternated), a bare `SimpleQueue` hop between Python
   threads under the same policy (`perf/noop_chains.py`'s bare chain, per stage): the
   floor a hand-off cannot go below in Python.
2. The recorder's writer, in this thread on 65,536 rows: converting stage rows (short and full
   width) and query rows to Arrow, and writing one Parquet chunk, per row. The writer does this
   in its own thread, but under the interpreter lock, in slices with a pause between them.
3. CPython's automatic garbage collections in a real 2,000 q/s open-loop window (recording on),
   with collection at idle moments turned off as before the hot-path work: how often, in which
   threads, and what a young pass costs (median, p99). Open loop now runs them at idle
   moments; closed loop keeps them where they fall.

`--quick`: fewer, shorter rounds (~30 s in all).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perf import common, loadgen_ours, noop_chains
from perf.common import report_header, spread, wait_for_quiet
from perf.studies import issue_delay_rounds
from stages.rundir.tables import ChunkWriter, read_table
from stages.runtime import recorder, row_slices
from stages.runtime.loadgen import open_loop
from stages.spec.loadgen import loadgen_spec

SCRIPT = "hot_path_costs"
DEPTH = 10
WRITER_ROWS = 65_536
GC_RATE_QPS = 2000


def log(message: str) -> None:
    common.log(SCRIPT, message)


def median_us(values: np.ndarray) -> float:
    return round(float(np.median(values)) / 1e3, 2)


def chain_parts(run_dir: Path, policy: str, window_s: float) -> dict[str, float]:
    """One recorded window of the depth-10 chain on one core: the parts of a query's way."""
    loadgen = loadgen_spec(
        type="closed_loop",
        concurrency=1,
        duration_s=window_s,
        warmup_queries=200,
        timeout_s=window_s + 60,
    )
    spec = noop_chains.noop_chain("chain", DEPTH, loadgen)
    with noop_chains.Placement({0}, policy):
        noop_chains.run_recorded(spec, run_dir)
    queries = read_table(run_dir, "queries").to_pandas()
    queries = queries[~queries["warmup"] & (queries["status"] == "ok")].sort_values("issued_ns")
    events = read_table(run_dir, "stage_events").to_pandas()
    events = events[events["query_id"].isin(queries["query_id"])]
    started = events.pivot(index="query_id", columns="stage", values="started_ns")
    finished = events.pivot(index="query_id", columns="stage", values="finished_ns")
    order = [f"s{index}" for index in range(DEPTH)]
    by_query = queries.set_index("query_id").loc[started.index]
    hops = np.concatenate(
        [
            (started[after] - finished[before]).to_numpy()
            for before, after in itertools.pairwise(order)
        ]
    )
    runs = np.concatenate([(finished[name] - started[name]).to_numpy() for name in order])
    completed, issued = queries["completed_ns"].to_numpy(), queries["issued_ns"].to_numpy()
    return {
        "issue_to_first_start_us": median_us(
            (started[order[0]] - by_query["issued_ns"]).to_numpy()
        ),
        "hand_off_us": median_us(hops),
        "noop_run_us": median_us(runs),
        "last_finish_to_completed_us": median_us(
            (by_query["completed_ns"] - finished[order[-1]]).to_numpy()
        ),
        "completed_to_next_issue_us": median_us(issued[1:] - completed[:-1]),
        "per_stage_us": median_us((completed - issued) / DEPTH),
    }


def measure_chain(policy: str, rounds: int, window_s: float, work: Path) -> dict[str, Any]:
    """Rounds of ours then the bare chain, under `policy`; medians [min, max] over rounds."""
    ours: list[dict[str, float]] = []
    bare: list[float] = []
    for round_index in range(rounds):
        ours.append(chain_parts(work / f"{policy}{round_index}", policy, window_s))
        with noop_chains.Placement({0}, policy):
            latency_ns, _ = noop_chains.bare_chain_latencies_ns(DEPTH, window_s, 200)
        bare.append(median_us(latency_ns / DEPTH))
    figures: dict[str, Any] = {name: spread([row[name] for row in ours]) for name in ours[0]}
    figures["bare_hop_us"] = spread(bare)
    figures["hand_off_minus_bare_hop_us"] = spread(
        [row["hand_off_us"] - hop for row, hop in zip(ours, bare, strict=True)]
    )
    log(f"chain under {policy}: {figures}")
    return figures


def stage_rows(count: int, width: int) -> list[tuple[Any, ...]]:
    full = (0, 3, 1, 10, 20, 30, 0, None, None, None, None, None, None)
    return [(index, *full[1:width]) for index in range(count)]


def measure_writer(work: Path) -> dict[str, float]:
    """Per row: Arrow conversion (no pauses, no issue schedule) and one Parquet chunk write."""
    saved_pause = row_slices.SLICE_PAUSE_S
    row_slices.SLICE_PAUSE_S = 0.0
    schedule = row_slices.IssueSchedule()
    figures: dict[str, float] = {}
    try:
        cases = {
            "stage_row_short": (
                recorder.STAGE_COLUMNS,
                recorder._STAGE_ROW_TYPES,
                stage_rows(WRITER_ROWS, recorder.SHORT_STAGE_ROW),
            ),
            "stage_row_full": (
                recorder.STAGE_COLUMNS,
                recorder._STAGE_ROW_TYPES,
                stage_rows(WRITER_ROWS, len(recorder.STAGE_COLUMNS)),
            ),
            "query_row": (
                recorder.QUERY_COLUMNS,
                recorder._QUERY_ROW_TYPES,
                [(index, 1, 2, 3, 0, 1, False) for index in range(WRITER_ROWS)],
            ),
        }
        for name, (names, types, rows) in cases.items():
            # rows_to_arrays consumes its list: each timing converts a fresh one.
            convert = row_slices.rows_to_arrays
            best = min(
                _timed(functools.partial(convert, names, types, list(rows), schedule))
                for _ in range(3)
            )
            figures[f"convert_{name}_us"] = round(best / WRITER_ROWS * 1e6, 3)
        names, types, rows = cases["stage_row_short"]
        columns = row_slices.rows_to_arrays(names, types, list(rows), schedule)
        columns["stage"] = pa.chunked_array([pa.array(["s3"] * WRITER_ROWS)])
        columns["status"] = pa.chunked_array([pa.array(["ok"] * WRITER_ROWS)])
        keys = {"run_id": "perf", "trial": 0, "phase": "solo", "pipeline": "chain"}
        writer = ChunkWriter(work, "stage_events", "costs", keys)
        writer.warm_up()
        best = min(_timed(lambda: writer.write_arrays(columns)) for _ in range(3))
        figures["parquet_write_stage_row_us"] = round(best / WRITER_ROWS * 1e6, 3)
    finally:
        row_slices.SLICE_PAUSE_S = saved_pause
    log(f"writer: {figures}")
    return figures


def _timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure_gc(work: Path, window_s: float) -> dict[str, Any]:
    """CPython's automatic collections in a real open-loop window (2,000 q/s into one `noop`
    stage, recording on), with `IdleCollector` swapped for automatic collection as before the
    hot-path work: each collection's generation, duration and thread, from `gc.callbacks`."""
    passes: list[tuple[int, int, str]] = []  # (generation, duration ns, thread name)
    started_ns = [0]

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started_ns[0] = time.perf_counter_ns()
        else:
            duration_ns = time.perf_counter_ns() - started_ns[0]
            passes.append((info["generation"], duration_ns, threading.current_thread().name))

    saved = getattr(open_loop, "IdleCollector")  # noqa: B009 - swapped for this window
    setattr(open_loop, "IdleCollector", issue_delay_rounds.AutomaticCollection)  # noqa: B010
    gc.callbacks.append(note)
    try:
        loadgen_ours.ours_server(GC_RATE_QPS, window_s, work)
    finally:
        gc.callbacks.remove(note)
        setattr(open_loop, "IdleCollector", saved)  # noqa: B010
    young = [duration for generation, duration, _ in passes if generation == 0]
    figures: dict[str, Any] = {
        "rate_qps": GC_RATE_QPS,
        "collections_per_s": round(len(passes) / window_s, 1),
        "young_pass_median_us": round(statistics.median(young) / 1e3, 1) if young else None,
        "young_pass_p99_us": round(float(np.percentile(young, 99)) / 1e3, 1) if young else None,
        "threads": sorted({thread for _, _, thread in passes}),
    }
    log(f"gc: {figures}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (~30 s)")
    args = parser.parse_args()
    rounds, window_s = (3, 1.0) if args.quick else (6, 2.0)
    waited_s = wait_for_quiet(SCRIPT, 5.0 if args.quick else 30.0)
    background: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="collobench-costs-") as directory:
        work = Path(directory)
        with common.BackgroundLoad() as load:
            chains = {
                policy: measure_chain(policy, rounds, window_s, work)
                for policy in ("other", "batch")
            }
        background["chains"] = load.pct
        with common.BackgroundLoad() as load:
            writer = measure_writer(work / "writer")
            collection = measure_gc(work / "gc", window_s * 2)
        background["writer_gc"] = load.pct
    report = {
        **report_header(SCRIPT, "quick" if args.quick else "full", waited_s, background),
        "depth": DEPTH,
        "rounds": rounds,
        "window_s": window_s,
        "chain_one_core": chains,
        "writer_per_row": writer,
        "gc": collection,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
