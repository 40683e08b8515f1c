"""The steps of `perf/analysis_speed.py`, each run in a child process of its own (so that its
peak memory is its own): `python -m perf.analysis_steps STEP ARGS...` prints one JSON object,
the step's figures with the process's peak resident memory. `run_child` and `run_children`
start them and read their answers."""

from __future__ import annotations

import hashlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf.common import REPO_ROOT

# Views with a row per query, stage visit or sample: streamed, not fetched whole (see
# perf/analysis_speed.py).
ROW_LEVEL_VIEWS = ("query_latency", "energy_samples")
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


def step_load(db_path: Path, run_dirs: list[Path]) -> dict[str, Any]:
    from analysis.warehouse.load_steps import LoadSteps
    from analysis.warehouse.loader import load_runs

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
    from analysis.warehouse.reader import connect_read_only

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
    from analysis.warehouse.reader import connect_read_only

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
    from analysis.warehouse.reader import connect_read_only

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
    from analysis.warehouse.reader import connect_read_only

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
    return [sys.executable, "-m", "perf.analysis_steps", step, *arguments]


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


STEPS: dict[str, Callable[[list[str]], dict[str, Any]]] = {
    "load": lambda arguments: step_load(Path(arguments[0]), [Path(p) for p in arguments[1:]]),
    "view": lambda arguments: step_view(Path(arguments[0]), arguments[1]),
    "reader": lambda arguments: step_reader(Path(arguments[0]), Path(arguments[1])),
    "digest": lambda arguments: step_digest(Path(arguments[0])),
    "duckdb_percentiles": lambda arguments: step_duckdb_percentiles(
        Path(arguments[0]), Path(arguments[1])
    ),
    "pandas_percentiles": lambda arguments: step_pandas_percentiles(
        Path(arguments[0]), Path(arguments[1])
    ),
}
"""Each step by name, from its command-line arguments."""


def child_main(step: str, arguments: list[str]) -> None:
    if step not in STEPS:
        raise SystemExit(f"unknown step {step}")
    result = STEPS[step](arguments)
    print(json.dumps({**result, "peak_rss_mib": peak_rss_mib()}))


if __name__ == "__main__":
    child_main(sys.argv[1], sys.argv[2:])
