"""How fast and how small the warehouse stays at fleet scale: loading, every view, concurrency.

Synthesises RUNS run directories (default 100 runs, 10M queries, 50M stage events; see
synth_runs.py) and measures, each step in a child process of its own so that its peak memory
(ru_maxrss: Python, DuckDB and the data) is its own:
- load: the RUNS runs into a fresh warehouse (`load_runs`, as `collobench load` does), with
  its wall and CPU seconds per step (analysis/load_steps.py: manifests, register files with
  their footer checks, summaries, writer lock, connect, schema, publish) and the machine's
  load average before and after (on a shared machine other processes stretch the wall time);
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
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.common import REPO_ROOT, BackgroundLoad, log, report_header, wait_for_quiet
from perf.load_pairs import paired_loads

SCRIPT = "analysis_speed"
# Views with a row per query, stage visit or sample: streamed, not fetched whole (see above).
ROW_LEVEL_VIEWS = ("query_latency", "energy_samples")
TARGETS = {
    "view_s": 2.0,
    "peak_rss_mib": 2048.0,
    "speedup_vs_pandas": 5.0,
    "load_s": 20.0,
    "load_one_s": 1.0,
}
STREAM_BATCH_ROWS = 100_000
# The figures two warehouses must agree on (two_writers): every stored summary's view.
COMPARED_VIEWS = ("throughput", "latency", "goodput", "stage_breakdown", "load_windows")


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_dirs_of(runs_dir: Path) -> list[Path]:
    return sorted(path for path in runs_dir.iterdir() if (path / "manifest.json").is_file())


def row_level(name: str) -> bool:
    from stages.rundir.schemas import TABLES

    return name in TABLES or name in ROW_LEVEL_VIEWS


# --- child steps: each prints one JSON object on stdout --------------------------------------


def step_load(db_path: Path, run_dirs: list[Path]) -> dict[str, Any]:
    from analysis.load_steps import LoadSteps
    from analysis.loader import load_runs

    steps = LoadSteps()
    started, cpu = time.perf_counter(), time.process_time()
    results = load_runs(run_dirs, db_path, notify=lambda message: None, steps=steps)
    return {
        "load_s": round(time.perf_counter() - started, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "lock_wait_s": round(steps.wall_s.get("writer_lock", 0.0), 3),
        "steps": steps.rounded(),
        "runs": len(results),
        "queries": sum(result.rows.get("queries", 0) for result in results),
        "stage_events": sum(result.rows.get("stage_events", 0) for result in results),
        "ended_at": time.time(),
    }


def step_view(db_path: Path, view: str) -> dict[str, Any]:
    from analysis.reader import connect_read_only

    connection = connect_read_only(db_path)
    started = time.perf_counter()
    if not row_level(view):
        rows = len(connection.execute(f"SELECT * FROM {view}").fetchall())
        return {"s": round(time.perf_counter() - started, 3), "rows": rows}
    # A relation's Arrow reader streams (DB-API `execute` would materialise the whole result).
    reader = connection.sql(f"SELECT * FROM {view}").to_arrow_reader(STREAM_BATCH_ROWS)
    rows = 0
    first_s = None
    for batch in reader:
        rows += batch.num_rows
        first_s = first_s if first_s is not None else time.perf_counter() - started
    drained_s = time.perf_counter() - started
    return {
        "s": round(first_s if first_s is not None else drained_s, 3),
        "stream_s": round(drained_s, 3),
        "rows": rows,
    }


def step_reader(db_path: Path, until_file: Path) -> dict[str, Any]:
    """Repeat `SELECT * FROM latency` on a fresh read-only connection until `until_file`
    exists (the writer is done); every answer's time, and the failures."""
    from analysis.reader import connect_read_only

    times: list[float] = []
    failures: list[str] = []
    while not until_file.exists():
        started = time.perf_counter()
        try:
            connection = connect_read_only(db_path, notify=lambda message: None)
            try:
                connection.execute("SELECT * FROM latency").fetchall()
            finally:
                connection.close()
        except Exception as error:  # a reader that fails is the figure, not a crash
            failures.append(f"{type(error).__name__}: {str(error)[:200]}")
        times.append(time.perf_counter() - started)
    ordered = sorted(times) or [0.0]
    return {
        "answers": len(times),
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
        "p50_s": round(ordered[len(ordered) // 2], 3),
        "max_s": round(ordered[-1], 3),
    }


def _rounded(value: Any) -> Any:
    """Floats to 12 significant digits: a sum in parallel may add in another order."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def step_digest(db_path: Path) -> dict[str, Any]:
    """A sha256 per compared view of its sorted rows (volatile columns left out, floats to
    12 significant digits)."""
    from analysis.reader import connect_read_only

    connection = connect_read_only(db_path)
    digests = {}
    for view in COMPARED_VIEWS:
        result = connection.execute(f"SELECT * FROM {view}")
        columns = [column[0] for column in result.description or []]
        keep = [i for i, name in enumerate(columns) if name not in ("loaded_at", "run_dir")]
        rows = sorted(repr([_rounded(row[i]) for i in keep]) for row in result.fetchall())
        digests[view] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    (runs,) = connection.execute("SELECT count(*) FROM runs").fetchone() or (0,)
    return {"digests": digests, "runs": int(runs)}


def step_duckdb_percentiles(db_path: Path, out: Path) -> dict[str, Any]:
    from analysis.reader import connect_read_only

    sql = (Path(__file__).parent / "sql" / "latency_percentiles.sql").read_text(encoding="utf-8")
    connection = connect_read_only(db_path)
    started = time.perf_counter()
    frame = connection.execute(sql).df()
    seconds = time.perf_counter() - started
    frame.to_parquet(out)
    return {"s": round(seconds, 3), "groups": len(frame)}


def step_pandas_percentiles(runs_dir: Path, out: Path) -> dict[str, Any]:
    """The same percentiles with pandas and numpy, written as a careful user would: read the
    run directories' Parquet, number the groups, one lexsort by (group, latency), then pick
    sorted[floor(N p)] at each group's offset (pandas' own quantile interpolations are not
    LoadGen's index)."""
    import numpy as np
    import pandas as pd

    columns = ["run_id", "trial", "phase", "pipeline", "scheduled_ns", "completed_ns"]
    started = time.perf_counter()
    frame = pd.concat(
        [
            pd.read_parquet(path / "queries.parquet", columns=[*columns, "status", "warmup"])
            for path in [*run_dirs_of(runs_dir), *run_dirs_of(runs_dir / "extra")]
        ],
        ignore_index=True,
    )
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    frame = frame[~frame["warmup"]]
    verdict = np.where(
        frame["status"].to_numpy() == "ok",
        (frame["completed_ns"].to_numpy(dtype="float64") - frame["scheduled_ns"].to_numpy()) / 1e6,
        np.inf,
    )
    keys = ["run_id", "trial", "phase", "pipeline"]
    group = frame.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()
    order = np.lexsort((verdict, group))
    sorted_values = verdict[order]
    sizes = np.bincount(group)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    figures = frame[keys].drop_duplicates().sort_values(keys).reset_index(drop=True)
    for name, p in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)):
        index = np.minimum(np.floor(sizes * p).astype(np.int64), sizes - 1)
        figures[f"{name}_ms"] = sorted_values[offsets + index]
    compute_s = time.perf_counter() - started
    figures.to_parquet(out)
    return {"read_s": round(read_s, 3), "compute_s": round(compute_s, 3), "groups": len(figures)}


def child_command(step: str, *arguments: str) -> list[str]:
    """A fresh interpreter running `step` of this module (`-m`, from the repository root)."""
    return [sys.executable, "-m", "perf.analysis_speed", "--step", step, *arguments]


def run_child(step: str, *arguments: str) -> dict[str, Any]:
    """Run one step in a fresh interpreter; its JSON result plus its peak memory."""
    completed = subprocess.run(
        child_command(step, *arguments), capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    return child_result(step, completed.returncode, completed.stdout, completed.stderr)


def child_result(step: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    if returncode != 0:
        raise RuntimeError(f"step {step} failed:\n{stderr[-3000:]}")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def run_children(*steps: tuple[str, ...]) -> list[dict[str, Any]]:
    """Run several steps at once, each in its own interpreter; their results in order."""
    children = [
        subprocess.Popen(
            child_command(*step),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        for step in steps
    ]
    results = []
    for step, child in zip(steps, children, strict=True):
        stdout, stderr = child.communicate()
        results.append(child_result(step[0], child.returncode, stdout, stderr))
    return results


def child_main(step: str, arguments: list[str]) -> None:
    if step == "load":
        result = step_load(Path(arguments[0]), [Path(path) for path in arguments[1:]])
    elif step == "view":
        result = step_view(Path(arguments[0]), arguments[1])
    elif step == "reader":
        result = step_reader(Path(arguments[0]), Path(arguments[1]))
    elif step == "digest":
        result = step_digest(Path(arguments[0]))
    elif step == "duckdb_percentiles":
        result = step_duckdb_percentiles(Path(arguments[0]), Path(arguments[1]))
    elif step == "pandas_percentiles":
        result = step_pandas_percentiles(Path(arguments[0]), Path(arguments[1]))
    else:
        raise SystemExit(f"unknown step {step}")
    print(json.dumps({**result, "peak_rss_mib": peak_rss_mib()}))


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
    from analysis.reader import connect_read_only

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
    per step, analysis/load_steps.py), one more run, the machine's load average before and
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


def main() -> None:
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
    parser.add_argument("--step", help=argparse.SUPPRESS)
    arguments, rest = parser.parse_known_args()
    if arguments.step:
        child_main(arguments.step, rest)
        return
    work = arguments.work or Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    runs_dir = work / "runs"
    db_path = fresh(work / "warehouse.duckdb")
    synth_s = synthesise(runs_dir, arguments.runs, arguments.queries_per_run, arguments.stages)
    run_dirs = run_dirs_of(runs_dir)
    (extra,) = run_dirs_of(runs_dir / "extra")
    waited_s = wait_for_quiet(SCRIPT, 60)
    loadavg_before = os.getloadavg()
    with BackgroundLoad() as background:
        log(SCRIPT, f"loading {len(run_dirs)} runs")
        load = run_child("load", str(db_path), *map(str, run_dirs))
        log(SCRIPT, f"loaded in {load['load_s']} s, peak {load['peak_rss_mib']} MiB")
        reference = run_child("digest", str(db_path))
        load_one = run_child("load", str(db_path), str(extra))
        log(SCRIPT, f"one more run: {load_one['load_s']} s")
        paired = None
        if arguments.baseline is not None:
            log(SCRIPT, f"{arguments.rounds} rounds paired with {arguments.baseline}")
            paired = paired_loads(work, run_dirs, arguments.baseline, arguments.rounds)
        loads = load_figures(load, load_one, paired, (loadavg_before, os.getloadavg()))
        if arguments.load_only:
            header = report_header(SCRIPT, "load_only", waited_s, {"pct": background.pct})
            print(json.dumps({**header, **loads}))
            if arguments.work is None:
                shutil.rmtree(work, ignore_errors=True)
            return
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
    agree = percentiles_agree(work / "duckdb.parquet", work / "pandas.parquet")
    slowest = max(views, key=lambda name: views[name]["s"])
    peak = max(view["peak_rss_mib"] for view in views.values())
    speedup = theirs["compute_s"] / ours["s"] if ours["s"] else None
    result = {
        **report_header(
            SCRIPT,
            "full" if arguments.runs >= 100 else "reduced",
            waited_s,
            {"pct": background.pct},
        ),
        "synthesise_s": synth_s,
        **loads,
        "warehouse_mib": round(db_path.stat().st_size / 2**20, 2),
        "slowest_view": slowest,
        "slowest_view_s": views[slowest]["s"],
        "view_peak_rss_mib": peak,
        "views": {name: view for name, view in views.items() if not row_level(name)},
        "row_level_views": {name: view for name, view in views.items() if row_level(name)},
        "reader_during_load": while_loading,
        "two_writers": writers,
        "percentiles": {
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
        },
        "targets": TARGETS,
        "met": {
            "load_s": load["load_s"] < TARGETS["load_s"],
            "load_one_s": load_one["load_s"] < TARGETS["load_one_s"],
            "view_s": views[slowest]["s"] < TARGETS["view_s"],
            "peak_rss_mib": peak < TARGETS["peak_rss_mib"],
            "reader_during_load": while_loading["reader_failures"] == 0
            and while_loading["reader_max_s"] < TARGETS["view_s"],
            "two_writers": writers["runs"] == len(run_dirs)
            and writers["same_figures_as_one_writer"],
            "speedup_vs_pandas": bool(speedup and speedup >= TARGETS["speedup_vs_pandas"]),
        },
    }
    print(json.dumps(result))
    if arguments.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
