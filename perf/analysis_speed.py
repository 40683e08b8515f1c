"""How fast and how small the warehouse stays at fleet scale: loading, every view, concurrency.

Synthesises RUNS run directories (default 100 runs, 10M queries, 50M stage events; see
synth_runs.py) and measures, each step in a child process of its own so that its peak memory
(ru_maxrss: Python, DuckDB and the data) is its own:
- load: the RUNS runs into a fresh warehouse (`load_runs`, as `collobench load` does), with
  its wall and CPU seconds per step (analysis/warehouse/load_steps.py: manifests, register files
  with their footer checks, summaries, writer lock, connect, schema, publish) and the machine's load
  average before and after (on a shared machine other processes stretch the wall time);
- with `--baseline DIR` (a worktree of an earlier commit): that load paired with the same load
  by DIR's code, round by round, the order alternating (perf/load_pairs.py);
- load_one: one more run of the same size into that full warehouse (the everyday case);
- views: `SELECT *` on every object `duckdb_views()` lists, over a read-only connection.
  A figure view is fetched whole. A row-level view (the raw tables and the per-row views:
  ROW_LEVEL) returns millions of rows, which no one fetches into Python at once: it is streamed
  in Arrow batches, timed to its first batch (when a user sees the answer start) and to its
  last, and its peak memory is that of the whole stream;
- reader_during_load: a reader repeating `SELECT * FROM latency` (connection opened and closed
  each time, as `collobench sql` does) while a writer loads half the runs into a warehouse that
  holds the other half: the reader's slowest answer, and its failures;
- two_writers: two writers loading 50% of the runs each into one fresh warehouse at once: the
  wall time of both, each one's wait for the writer lock, and whether the warehouse then gives
  exactly the figures of the one-writer warehouse;
- percentiles: LoadGen's latency percentiles of every query with DuckDB and with pandas.
Prints one JSON line with every figure, the targets (load < 20 s, one run < 1 s, every view
< 2 s and < 2 GB, percentiles >= 5x pandas) and met / missed.

    python -m perf.analysis_speed                  # the full size (about 3 min to synthesise)
    python -m perf.analysis_speed --runs 10        # a tenth of it
    python -m perf.analysis_speed --work /tmp/as   # keep (and reuse) the synthesised runs there
    python -m perf.analysis_speed --load-only --baseline /tmp/old-worktree --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.analysis_steps import (
    child_command,
    child_result,
    row_level,
    run_child,
    run_children,
    run_dirs_of,
)
from perf.common import REPO_ROOT, BackgroundLoad, log, report_header, wait_for_quiet
from perf.load_pairs import paired_loads

SCRIPT = "analysis_speed"
TARGETS = {
    "view_s": 2.0,
    "peak_rss_mib": 2048.0,
    "speedup_vs_pandas": 5.0,
    "load_s": 20.0,
    "load_one_s": 1.0,
}


# --- the benchmark ---------------------------------------------------------------------------


def synthesise(runs_dir: Path, runs: int, queries_per_run: int, stages: int) -> float:
    """Write the run directories that are missing; returns the seconds it took. One more run
    than asked is written apart (`extra/`): the run load_one adds to the full warehouse."""
    from perf.synth_runs import synthesise_run

    started = time.perf_counter()
    runs_dir.mkdir(parents=True, exist_ok=True)
    marker = runs_dir / "synthesised.json"
    wanted = {"runs": runs, "queries_per_run": queries_per_run, "stages": stages}
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        log(SCRIPT, f"reusing the runs in {runs_dir}")
    else:
        shutil.rmtree(runs_dir)
        runs_dir.mkdir(parents=True)
        for number in range(runs):
            synthesise_run(runs_dir, number, queries_per_run, stages, seed=1)
            if (number + 1) % 10 == 0:
                log(SCRIPT, f"synthesised {number + 1}/{runs} runs")
        marker.write_text(json.dumps(wanted))
    if not (runs_dir / "extra").is_dir():
        synthesise_run(runs_dir / "extra", runs, queries_per_run, stages, seed=1)
    return round(time.perf_counter() - started, 1)


def view_names(db_path: Path) -> list[str]:
    from analysis.warehouse.reader import connect_read_only

    connection = connect_read_only(db_path)
    rows = connection.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
    ).fetchall()
    connection.close()
    return [name for (name,) in rows]


def percentiles_agree(duckdb_file: Path, pandas_file: Path) -> bool:
    import pandas as pd

    ours = pd.read_parquet(duckdb_file).sort_values(["run_id", "phase", "pipeline"])
    theirs = pd.read_parquet(pandas_file).sort_values(["run_id", "phase", "pipeline"])
    columns = ["p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms"]
    return bool(
        len(ours) == len(theirs) and (ours[columns].to_numpy() == theirs[columns].to_numpy()).all()
    )


def fresh(db_path: Path) -> Path:
    """`db_path` with no warehouse (nor its lock, WAL or spill folder) left from a last run."""
    for suffix in ("", ".wal", ".lock"):
        db_path.with_name(db_path.name + suffix).unlink(missing_ok=True)
    shutil.rmtree(db_path.with_name(db_path.name + ".tmp"), ignore_errors=True)
    return db_path


def reader_during_load(work: Path, run_dirs: list[Path]) -> dict[str, Any]:
    """A writer loads the second half of the runs into a warehouse holding the first half,
    while a reader keeps querying it."""
    db = fresh(work / "reader.duckdb")
    half = len(run_dirs) // 2
    run_child("load", str(db), *map(str, run_dirs[:half]))
    done = work / "writer-done"
    done.unlink(missing_ok=True)
    reader = subprocess.Popen(
        child_command("reader", str(db), str(done)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        writer = run_child("load", str(db), *map(str, run_dirs[half:]))
    finally:
        done.touch()
    stdout, stderr = reader.communicate()
    read = child_result("reader", reader.returncode, stdout, stderr)
    return {
        "writer_runs": writer["runs"],
        "writer_load_s": writer["load_s"],
        "reader_answers": read["answers"],
        "reader_failures": read["failures"],
        "reader_first_failure": read["first_failure"],
        "reader_p50_s": read["p50_s"],
        "reader_max_s": read["max_s"],
    }


def two_writers(work: Path, run_dirs: list[Path], reference: dict[str, Any]) -> dict[str, Any]:
    """Two writers load one half of the runs each into one fresh warehouse, at once."""
    db = fresh(work / "two_writers.duckdb")
    half = len(run_dirs) // 2
    started = time.perf_counter()
    first, second = run_children(
        ("load", str(db), *map(str, run_dirs[:half])),
        ("load", str(db), *map(str, run_dirs[half:])),
    )
    wall_s = time.perf_counter() - started
    digest = run_child("digest", str(db))
    return {
        "wall_s": round(wall_s, 2),
        "writer_load_s": [first["load_s"], second["load_s"]],
        "writer_lock_wait_s": [first["lock_wait_s"], second["lock_wait_s"]],
        "runs": digest["runs"],
        "same_figures_as_one_writer": digest["digests"] == reference["digests"],
    }


def load_figures(
    load: dict[str, Any],
    load_one: dict[str, Any],
    paired: dict[str, Any] | None,
    loadavg: tuple[tuple[float, ...], tuple[float, ...]],
) -> dict[str, Any]:
    """The JSON line's load keys: the load and its per-step breakdown (wall and CPU seconds
    per step, analysis/warehouse/load_steps.py), one more run, the machine's load average before and
    after, and the paired comparison with a baseline (None without --baseline)."""
    return {
        "runs": load["runs"],
        "queries": load["queries"],
        "stage_events": load["stage_events"],
        "load_s": load["load_s"],
        "load_cpu_s": load["cpu_s"],
        "load_peak_rss_mib": load["peak_rss_mib"],
        "load_steps": load["steps"],
        "load_one_s": load_one["load_s"],
        "load_one_peak_rss_mib": load_one["peak_rss_mib"],
        "load_one_steps": load_one["steps"],
        "loadavg_1m_5m_15m": {
            "before": [round(value, 2) for value in loadavg[0]],
            "after": [round(value, 2) for value in loadavg[1]],
        },
        "paired_with_baseline": paired,
        "load_met": {
            "load_s": load["load_s"] < TARGETS["load_s"],
            "load_one_s": load_one["load_s"] < TARGETS["load_one_s"],
        },
    }


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--queries-per-run", type=int, default=100_000)
    parser.add_argument("--stages", type=int, default=5, help="stage visits per query")
    parser.add_argument("--work", type=Path, help="keep the runs and warehouse here")
    parser.add_argument(
        "--load-only",
        action="store_true",
        help="measure the loads only (load, load_one, the per-step breakdown, the baseline)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a worktree of an earlier commit: its load paired with ours, round by round",
    )
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds with --baseline")
    arguments, _ = parser.parse_known_args()
    return arguments


def measure_loads(
    db_path: Path,
    run_dirs: list[Path],
    extra: Path,
    arguments: argparse.Namespace,
    loadavg_before: tuple[float, ...],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The load, one more run and the pairing with --baseline: the JSON line's load keys, and
    the loaded warehouse's digest (what two writers must reproduce)."""
    log(SCRIPT, f"loading {len(run_dirs)} runs")
    load = run_child("load", str(db_path), *map(str, run_dirs))
    log(SCRIPT, f"loaded in {load['load_s']} s, peak {load['peak_rss_mib']} MiB")
    reference = run_child("digest", str(db_path))
    load_one = run_child("load", str(db_path), str(extra))
    log(SCRIPT, f"one more run: {load_one['load_s']} s")
    paired = None
    if arguments.baseline is not None:
        log(SCRIPT, f"{arguments.rounds} rounds paired with {arguments.baseline}")
        paired = paired_loads(db_path.parent, run_dirs, arguments.baseline, arguments.rounds)
    return load_figures(load, load_one, paired, (loadavg_before, os.getloadavg())), reference


def measure_reads(
    db_path: Path, runs_dir: Path, run_dirs: list[Path], reference: dict[str, Any]
) -> dict[str, Any]:
    """Every view, a reader during a load, two writers, and the percentiles both ways."""
    work = db_path.parent
    views: dict[str, dict[str, Any]] = {}
    for view in view_names(db_path):
        views[view] = run_child("view", str(db_path), view)
        log(SCRIPT, f"{view}: {views[view]['s']} s, {views[view]['peak_rss_mib']} MiB")
    log(SCRIPT, "a reader while a writer loads")
    while_loading = reader_during_load(work, run_dirs)
    log(SCRIPT, f"reader: {while_loading}")
    log(SCRIPT, "two writers at once")
    writers = two_writers(work, run_dirs, reference)
    log(SCRIPT, f"two writers: {writers}")
    log(SCRIPT, "percentiles: DuckDB, then pandas")
    ours = run_child("duckdb_percentiles", str(db_path), str(work / "duckdb.parquet"))
    theirs = run_child("pandas_percentiles", str(runs_dir), str(work / "pandas.parquet"))
    return {
        "views": views,
        "reader_during_load": while_loading,
        "two_writers": writers,
        "ours": ours,
        "theirs": theirs,
    }


def read_figures(
    reads: dict[str, Any], db_path: Path, loads: dict[str, Any], runs: int
) -> dict[str, Any]:
    """The JSON line's keys after the loads': views, concurrency, percentiles, targets, met."""
    views, while_loading, writers = (
        reads["views"],
        reads["reader_during_load"],
        reads["two_writers"],
    )
    work = db_path.parent
    agree = percentiles_agree(work / "duckdb.parquet", work / "pandas.parquet")
    slowest = max(views, key=lambda name: views[name]["s"])
    peak = max(view["peak_rss_mib"] for view in views.values())
    ours, theirs = reads["ours"], reads["theirs"]
    speedup = theirs["compute_s"] / ours["s"] if ours["s"] else None
    return {
        "warehouse_mib": round(db_path.stat().st_size / 2**20, 2),
        "slowest_view": slowest,
        "slowest_view_s": views[slowest]["s"],
        "view_peak_rss_mib": peak,
        "views": {name: view for name, view in views.items() if not row_level(name)},
        "row_level_views": {name: view for name, view in views.items() if row_level(name)},
        "reader_during_load": while_loading,
        "two_writers": writers,
        "percentiles": percentile_figures(ours, theirs, speedup, agree),
        "targets": TARGETS,
        "met": {
            "load_s": loads["load_s"] < TARGETS["load_s"],
            "load_one_s": loads["load_one_s"] < TARGETS["load_one_s"],
            "view_s": views[slowest]["s"] < TARGETS["view_s"],
            "peak_rss_mib": peak < TARGETS["peak_rss_mib"],
            "reader_during_load": while_loading["reader_failures"] == 0
            and while_loading["reader_max_s"] < TARGETS["view_s"],
            "two_writers": writers["runs"] == runs and writers["same_figures_as_one_writer"],
            "speedup_vs_pandas": bool(speedup and speedup >= TARGETS["speedup_vs_pandas"]),
        },
    }


def percentile_figures(
    ours: dict[str, Any], theirs: dict[str, Any], speedup: float | None, agree: bool
) -> dict[str, Any]:
    """LoadGen's percentiles from the raw rows: DuckDB against pandas and numpy."""
    return {
        "groups": ours["groups"],
        "duckdb_s": ours["s"],
        "duckdb_peak_rss_mib": ours["peak_rss_mib"],
        "pandas_read_s": theirs["read_s"],
        "pandas_compute_s": theirs["compute_s"],
        "pandas_peak_rss_mib": theirs["peak_rss_mib"],
        "speedup_vs_pandas_compute": round(speedup, 2) if speedup else None,
        "speedup_vs_pandas_read_and_compute": round(
            (theirs["read_s"] + theirs["compute_s"]) / ours["s"], 2
        )
        if ours["s"]
        else None,
        "agree": agree,
    }


def main() -> None:
    arguments = parse_arguments()
    work = arguments.work or Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    runs_dir = work / "runs"
    db_path = fresh(work / "warehouse.duckdb")
    synth_s = synthesise(runs_dir, arguments.runs, arguments.queries_per_run, arguments.stages)
    run_dirs = run_dirs_of(runs_dir)
    (extra,) = run_dirs_of(runs_dir / "extra")
    waited_s = wait_for_quiet(SCRIPT, 60)
    loadavg_before = os.getloadavg()
    with BackgroundLoad() as background:
        loads, reference = measure_loads(db_path, run_dirs, extra, arguments, loadavg_before)
        if arguments.load_only:
            header = report_header(SCRIPT, "load_only", waited_s, {"pct": background.pct})
            print(json.dumps({**header, **loads}))
            if arguments.work is None:
                shutil.rmtree(work, ignore_errors=True)
            return
        reads = measure_reads(db_path, runs_dir, run_dirs, reference)
    mode = "full" if arguments.runs >= 100 else "reduced"
    result = {
        **report_header(SCRIPT, mode, waited_s, {"pct": background.pct}),
        "synthesise_s": synth_s,
        **loads,
        **read_figures(reads, db_path, loads, len(run_dirs)),
    }
    print(json.dumps(result))
    if arguments.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
