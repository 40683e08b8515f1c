"""Our load generator's side of `perf/loadgen_accuracy.py`: a one-stage `noop` pipeline under
a Server (Poisson) or Offline load, run in this process with Parquet recording
(`run_pipeline`), or through the product path (`collobench run`, or Dagster), with the figures
of how it kept its schedule read back from the recorded rows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perf import common, product_path
from perf.common import PeriodicSampler, pct_or_none, run_recorded_table, us
from stages.runtime.driver import PhaseResult
from stages.spec.loadgen import LoadgenSpec, loadgen_spec
from stages.spec.models import PipelineSpec, StageSpec

LATE_ISSUE_NS = 100_000
OFFLINE_SAMPLES = 100_000
DEFAULT_SLACK_NS = 50_000
SCRIPT = "loadgen_accuracy"
"""The benchmark these windows belong to (the prefix of their progress lines)."""


def log(message: str) -> None:
    common.log(SCRIPT, message)


def process_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class CpuSampler(PeriodicSampler):
    """Samples this process's CPU seconds (`os.times`) every 100 ms in a background thread, so
    the CPU used inside the load window can be told apart from set-up and read-back."""

    def __init__(self) -> None:
        super().__init__(process_cpu_s, period_s=0.1, name="cpu")

    def pct_of_core(self, start_ns: int, end_ns: int) -> float | None:
        inside = [(ts, cpu) for ts, cpu in self.samples if start_ns <= ts <= end_ns]
        if len(inside) < 2:
            return None
        (ts0, cpu0), (ts1, cpu1) = inside[0], inside[-1]
        return round((cpu1 - cpu0) / ((ts1 - ts0) / 1e9) * 100, 1)


def noop_pipeline(name: str, loadgen: LoadgenSpec) -> PipelineSpec:
    return PipelineSpec(name=name, loadgen=loadgen, stages=[StageSpec(id="nothing", type="noop")])


def run_recorded(spec: PipelineSpec, run_dir: Path) -> tuple[PhaseResult, dict[str, np.ndarray]]:
    """Run in this process with Parquet recording; return the result and the query rows."""
    # Stage threads start as in a fresh worker process.
    result, table = run_recorded_table(SCRIPT, spec, run_dir, slack_ns=DEFAULT_SLACK_NS)
    return result, query_rows(table)


def query_rows(table: pa.Table) -> dict[str, np.ndarray]:
    """A `queries` table's scheduled, issued and completed times and its status, as arrays."""
    rows: dict[str, np.ndarray] = {
        name: table.column(name).to_numpy(zero_copy_only=False)
        for name in ("scheduled_ns", "issued_ns", "completed_ns")
    }
    rows["status"] = np.array(table.column("status").to_pylist())
    return rows


def schedule_figures(rows: dict[str, np.ndarray]) -> dict[str, Any]:
    """How a window kept its schedule (`query_rows`): the query counts, issue delay p50/p99/max
    in us, the share issued more than 100 us late, and latency p99 from the schedule (ok
    queries)."""
    issued = rows["status"] != "dropped"
    ok = rows["status"] == "ok"
    delay = (rows["issued_ns"] - rows["scheduled_ns"])[issued].astype(np.int64)
    latency = (rows["completed_ns"][ok] - rows["scheduled_ns"][ok]).astype(np.int64)
    return {
        "queries": int(rows["status"].size),
        "dropped": int((~issued).sum()),
        "issue_delay_p50_us": us(pct_or_none(delay, 50), 2),
        "issue_delay_p99_us": us(pct_or_none(delay, 99), 2),
        "issue_delay_max_us": us(float(delay.max()) if delay.size else None, 2),
        "issue_delay_over_100us_share": late_share(delay),
        "latency_p99_us": us(pct_or_none(latency, 99)),
    }


def ours_server(rate: float, duration_s: float, work: Path) -> dict[str, Any]:
    loadgen = loadgen_spec(
        type="server", rate=rate, duration_s=duration_s, timeout_s=duration_s + 60
    )
    with CpuSampler() as cpu:
        result, rows = run_recorded(noop_pipeline(f"server{int(rate)}", loadgen), work)
    start_ns = result.outcome.start_ns
    issued = rows["status"] != "dropped"
    ok = rows["status"] == "ok"
    delay = (rows["issued_ns"] - rows["scheduled_ns"])[issued].astype(np.int64)
    latency = (rows["completed_ns"][ok] - rows["scheduled_ns"][ok]).astype(np.int64)
    scheduled = np.sort(rows["scheduled_ns"])
    issued_ns = np.sort(rows["issued_ns"][issued])
    early = delay[delay < 0]
    figures = {
        "target_qps": rate,
        "status": result.status,
        **schedule_figures(rows),
        "issued_early_fraction": round(float(early.size / max(1, delay.size)), 4),
        "issue_delay_min_us": us(float(delay.min()) if delay.size else None, 2),
        "latency_p50_us": us(pct_or_none(latency, 50)),
        "latency_max_us": us(float(latency.max()) if latency.size else None),
        "scheduled_qps": round(scheduled.size / ((scheduled[-1] - start_ns) / 1e9), 1),
        "issued_qps": round(issued_ns.size / ((issued_ns[-1] - start_ns) / 1e9), 1),
        "completed_qps": round(
            int(ok.sum()) / ((int(rows["completed_ns"][ok].max()) - start_ns) / 1e9), 1
        ),
        # The whole process inside the load window: issuer, stage and recorder threads.
        "process_cpu_pct_of_core": cpu.pct_of_core(start_ns, start_ns + int(duration_s * 1e9)),
    }
    log(
        f"ours server {rate:.0f}/s: issue delay p50 {figures['issue_delay_p50_us']} us, "
        f"p99 {figures['issue_delay_p99_us']} us, max {figures['issue_delay_max_us']} us, "
        f"early {figures['issued_early_fraction']}, dropped {figures['dropped']}, "
        f"latency p99 {figures['latency_p99_us']} us"
    )
    return figures


def late_share(delay_ns: np.ndarray) -> float | None:
    """Share of issued queries issued more than LATE_ISSUE_NS after their schedule."""
    return round(float((delay_ns > LATE_ISSUE_NS).mean()), 5) if delay_ns.size else None


def ours_product_server(rate: float, duration_s: float, work: Path, path: str) -> dict[str, Any]:
    """The same one-stage `noop` pipeline and load through the product path `path`: `cli`
    (`collobench run`, a subprocess) or `dagster` (materialised by Dagster, which starts the
    same command as a Pipes child); issue delay and latency from the run directory's rows."""
    loadgen = loadgen_spec(
        type="server", rate=rate, duration_s=duration_s, timeout_s=duration_s + 60
    )
    document = product_path.spec_document(f"noop-{path}", [noop_pipeline("noop", loadgen)])
    run = product_path.run_spec if path == "cli" else product_path.run_dagster
    try:
        run_dir = run(document, work, f"noop-{path}")
    except product_path.ProductPathError as error:
        log(f"ours through {path}: {error}")
        return {"error": str(error).splitlines()[0]}
    figures = schedule_figures(query_rows(product_path.measured_queries(run_dir, "noop")))
    log(
        f"ours through {path} {rate:.0f}/s: issue delay p50 {figures['issue_delay_p50_us']} us, "
        f"p99 {figures['issue_delay_p99_us']} us, latency p99 {figures['latency_p99_us']} us"
    )
    return figures


def ours_offline(repeats: int, work: Path) -> dict[str, Any]:
    rates = []
    for repeat in range(repeats):
        loadgen = loadgen_spec(
            type="offline", samples_per_query=OFFLINE_SAMPLES, duration_s=0, timeout_s=120
        )
        result, rows = run_recorded(noop_pipeline("offline", loadgen), work / f"off{repeat}")
        ok = rows["status"] == "ok"
        span_s = (int(rows["completed_ns"][ok].max()) - result.outcome.start_ns) / 1e9
        rates.append(int(ok.sum()) / span_s)
    log(f"ours offline: {[round(r) for r in rates]} samples/s")
    return {"samples_per_s": round(float(np.median(rates))), "runs": [round(r) for r in rates]}
