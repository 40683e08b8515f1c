"""How fast and how small the warehouse stays at scale: load, every view, percentiles vs pandas.

Synthesises RUNS run directories (default 100 runs, 10M queries, 50M stage events; see
synth_runs.py), loads them into a fresh DuckDB warehouse, queries every view, and computes the
same latency percentiles from the raw rows with DuckDB and with pandas. Each step runs in a
child process of its own, so its peak memory (ru_maxrss: Python, DuckDB and the data) is its
own. Prints one JSON line: load seconds and peak memory, each view's seconds, rows and peak
memory, the percentile timings with the speed-up and whether both agree, and the targets
(every view < 2 s, peak < 2 GB, percentiles >= 5x pandas, load < 20 s) with met/missed.

    python perf/analysis_speed.py                  # the full size (about 3 min to synthesise)
    python perf/analysis_speed.py --runs 10        # a tenth of it
    python perf/analysis_speed.py --work /tmp/as   # keep (and reuse) the synthesised runs there

Views are timed as a reader meets them: `SELECT *` fetched whole, on a read-only connection.
Row-level views (one row per query, stage visit or sample: ROW_LEVEL) are building blocks, not
figures; they are timed as `SELECT count(*)`, and listed apart. `<view>_from_rows` definitions
(what the loader stores per run) are not timed: their cost is inside the load figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import REPO_ROOT, BackgroundLoad, log, report_header, wait_for_quiet

SCRIPT = "analysis_speed"
ROW_LEVEL = ("query_latency", "measured_stage_events", "energy_samples")
TARGETS = {"view_s": 2.0, "peak_rss_mib": 2048.0, "speedup_vs_pandas": 5.0, "load_s": 20.0}


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# --- child steps: each prints one JSON object on stdout --------------------------------------


def step_load(runs_dir: Path, db_path: Path) -> dict[str, Any]:
    from analysis.loader import load_runs

    run_dirs = sorted(path for path in runs_dir.iterdir() if (path / "manifest.json").is_file())
    started = time.perf_counter()
    results = load_runs(run_dirs, db_path)
    return {
        "load_s": round(time.perf_counter() - started, 2),
        "runs": len(results),
        "queries": sum(result.rows.get("queries", 0) for result in results),
        "stage_events": sum(result.rows.get("stage_events", 0) for result in results),
    }


def step_view(db_path: Path, view: str) -> dict[str, Any]:
    from analysis.db import connect_read_only

    connection = connect_read_only(db_path)
    started = time.perf_counter()
    if view in ROW_LEVEL:
        (rows,) = connection.execute(f"SELECT count(*) FROM {view}").fetchone() or (0,)
    else:
        rows = len(connection.execute(f"SELECT * FROM {view}").fetchall())
    return {"s": round(time.perf_counter() - started, 3), "rows": int(rows)}


def step_duckdb_percentiles(db_path: Path, out: Path) -> dict[str, Any]:
    from analysis.db import connect_read_only

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
            for path in sorted(runs_dir.iterdir())
            if (path / "queries.parquet").is_file()
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


def run_child(step: str, *arguments: str) -> dict[str, Any]:
    """Run one step in a fresh interpreter; its JSON result plus its peak memory."""
    completed = subprocess.run(
        [sys.executable, __file__, "--step", step, *arguments],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"step {step} failed:\n{completed.stderr[-3000:]}")
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


def child_main(step: str, arguments: list[str]) -> None:
    if step == "load":
        result = step_load(Path(arguments[0]), Path(arguments[1]))
    elif step == "view":
        result = step_view(Path(arguments[0]), arguments[1])
    elif step == "duckdb_percentiles":
        result = step_duckdb_percentiles(Path(arguments[0]), Path(arguments[1]))
    elif step == "pandas_percentiles":
        result = step_pandas_percentiles(Path(arguments[0]), Path(arguments[1]))
    else:
        raise SystemExit(f"unknown step {step}")
    print(json.dumps({**result, "peak_rss_mib": peak_rss_mib()}))


# --- the benchmark ---------------------------------------------------------------------------


def synthesise(runs_dir: Path, runs: int, queries_per_run: int, stages: int) -> float:
    """Write the run directories that are missing; returns the seconds it took."""
    from synth_runs import synthesise_run

    started = time.perf_counter()
    runs_dir.mkdir(parents=True, exist_ok=True)
    marker = runs_dir / "synthesised.json"
    wanted = {"runs": runs, "queries_per_run": queries_per_run, "stages": stages}
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        log(SCRIPT, f"reusing the runs in {runs_dir}")
        return 0.0
    shutil.rmtree(runs_dir)
    runs_dir.mkdir(parents=True)
    for number in range(runs):
        synthesise_run(runs_dir, number, queries_per_run, stages, seed=1)
        if (number + 1) % 10 == 0:
            log(SCRIPT, f"synthesised {number + 1}/{runs} runs")
    marker.write_text(json.dumps(wanted))
    return round(time.perf_counter() - started, 1)


def view_names(db_path: Path) -> list[str]:
    from analysis.db import connect_read_only

    connection = connect_read_only(db_path)
    rows = connection.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
        "ORDER BY view_name"
    ).fetchall()
    connection.close()
    return [name for (name,) in rows if not name.endswith("_from_rows")]


def percentiles_agree(duckdb_file: Path, pandas_file: Path) -> bool:
    import pandas as pd

    ours = pd.read_parquet(duckdb_file).sort_values(["run_id", "phase", "pipeline"])
    theirs = pd.read_parquet(pandas_file).sort_values(["run_id", "phase", "pipeline"])
    columns = ["p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms"]
    return bool(
        len(ours) == len(theirs) and (ours[columns].to_numpy() == theirs[columns].to_numpy()).all()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--queries-per-run", type=int, default=100_000)
    parser.add_argument("--stages", type=int, default=5, help="stage visits per query")
    parser.add_argument("--work", type=Path, help="keep the runs and warehouse here")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    arguments, rest = parser.parse_known_args()
    if arguments.step:
        child_main(arguments.step, rest)
        return
    work = arguments.work or Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    runs_dir, db_path = work / "runs", work / "warehouse.duckdb"
    synth_s = synthesise(runs_dir, arguments.runs, arguments.queries_per_run, arguments.stages)
    for path in (db_path, db_path.with_name(db_path.name + ".wal")):
        path.unlink(missing_ok=True)
    waited_s = wait_for_quiet(SCRIPT, 60)
    with BackgroundLoad() as background:
        log(SCRIPT, "loading")
        load = run_child("load", str(runs_dir), str(db_path))
        log(SCRIPT, f"loaded in {load['load_s']} s, peak {load['peak_rss_mib']} MiB")
        views: dict[str, dict[str, Any]] = {}
        for view in view_names(db_path):
            views[view] = run_child("view", str(db_path), view)
            log(SCRIPT, f"{view}: {views[view]['s']} s")
        log(SCRIPT, "percentiles: DuckDB, then pandas")
        ours = run_child("duckdb_percentiles", str(db_path), str(work / "duckdb.parquet"))
        theirs = run_child("pandas_percentiles", str(runs_dir), str(work / "pandas.parquet"))
    agree = percentiles_agree(work / "duckdb.parquet", work / "pandas.parquet")
    figures = {name: view for name, view in views.items() if name not in ROW_LEVEL}
    slowest = max(figures, key=lambda name: figures[name]["s"])
    peak = max(
        [load["peak_rss_mib"], ours["peak_rss_mib"]] + [v["peak_rss_mib"] for v in views.values()]
    )
    speedup = theirs["compute_s"] / ours["s"] if ours["s"] else None
    result = {
        **report_header(
            SCRIPT,
            "full" if arguments.runs >= 100 else "reduced",
            waited_s,
            {"pct": background.pct},
        ),
        "runs": load["runs"],
        "queries": load["queries"],
        "stage_events": load["stage_events"],
        "synthesise_s": synth_s,
        "load_s": load["load_s"],
        "load_peak_rss_mib": load["peak_rss_mib"],
        "warehouse_mib": round(db_path.stat().st_size / 2**20, 1),
        "slowest_view": slowest,
        "slowest_view_s": figures[slowest]["s"],
        "peak_rss_mib": peak,
        "views": figures,
        "row_level_views": {name: views[name] for name in ROW_LEVEL if name in views},
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
            "view_s": figures[slowest]["s"] < TARGETS["view_s"],
            "peak_rss_mib": peak < TARGETS["peak_rss_mib"],
            "speedup_vs_pandas": bool(speedup and speedup >= TARGETS["speedup_vs_pandas"]),
            "load_s": load["load_s"] < TARGETS["load_s"],
        },
    }
    print(json.dumps(result))
    if arguments.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
