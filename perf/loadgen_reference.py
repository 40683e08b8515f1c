"""MLPerf LoadGen, measured beside ours by `perf/loadgen_accuracy.py`: one LoadGen test with a
null Python SUT (`issue_query` puts the samples on a `queue.SimpleQueue`; a worker thread calls
`QuerySamplesComplete` at once) and a QSL of QSL_SAMPLES samples, in a child process of its own
(`run_loadgen` runs `python -m perf.loadgen_reference CONFIG_JSON`, which prints the figures),
so LoadGen's threads never share a process with ours. Issue delays come from its trace, its
latency percentiles and rates from its detail log."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from perf.common import pct_or_none, us
from stages.runtime.loadgen.timing import set_timer_slack_ns, timer_slack_ns

QSL_SAMPLES = 1024


def _mllog(path: Path) -> dict[str, Any]:
    """{key: value} of a LoadGen detail log (`:::MLLOG {json}` lines)."""
    values: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        if line.startswith(":::MLLOG "):
            try:
                entry = json.loads(line[len(":::MLLOG ") :])
            except json.JSONDecodeError:
                continue
            values[entry["key"]] = entry["value"]
    return values


def _trace_issue_delays_ns(path: Path) -> np.ndarray:
    """Per-sample `issue_delay` of the `Latency` counter events in LoadGen's trace."""
    delays = []
    with path.open() as handle:
        for line in handle:
            if line.startswith('{"name":"Latency"'):
                entry = json.loads(line.rstrip().rstrip(","))
                delays.append(int(entry["args"]["issue_delay"]))
    return np.array(delays, dtype=np.int64)


def loadgen_child(config: dict[str, Any]) -> dict[str, Any]:
    """Runs in a child process: one LoadGen test with a null Python SUT; returns its figures."""
    import queue

    import mlperf_loadgen as lg

    set_timer_slack_ns(int(config["slack_ns"]))  # before the worker thread: it inherits it
    slack = timer_slack_ns()
    samples: queue.SimpleQueue[Any] = queue.SimpleQueue()
    per_sample = config["scenario"] == "offline"

    def worker() -> None:
        get, response, complete = samples.get, lg.QuerySampleResponse, lg.QuerySamplesComplete
        while True:
            item = get()
            if item is None:
                return
            if per_sample:
                complete([response(item.id, 0, 0)])
            else:
                complete([response(sample.id, 0, 0) for sample in item])

    def issue_query(query_samples: list[Any]) -> None:
        if per_sample:
            put = samples.put
            for sample in query_samples:
                put(sample)
        else:
            samples.put(query_samples)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    settings = loadgen_settings(lg, config)
    out_dir = Path(config["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(out_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = config["scenario"] == "server"
    sut = lg.ConstructSUT(issue_query, lambda: None)
    qsl = lg.ConstructQSL(QSL_SAMPLES, QSL_SAMPLES, lambda indices: None, lambda indices: None)
    cpu_before = time.process_time()
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        cpu_s = time.process_time() - cpu_before
    finally:
        samples.put(None)
        thread.join(5)
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return figures_of(config, out_dir, slack, cpu_s)


def figures_of(
    config: dict[str, Any], out_dir: Path, slack: int | None, cpu_s: float
) -> dict[str, Any]:
    """A finished LoadGen test's figures, from its detail log (and trace, for Server)."""
    detail = _mllog(out_dir / "mlperf_log_detail.txt")
    figures: dict[str, Any] = {
        "timer_slack_ns": slack,
        "validity": detail.get("result_validity"),
        "query_count": detail.get("result_query_count"),
        "latency_p50_us": us(detail.get("result_50.00_percentile_latency_ns")),
        "latency_p99_us": us(detail.get("result_99.00_percentile_latency_ns")),
        "latency_max_us": us(detail.get("result_max_latency_ns")),
    }
    if config["scenario"] == "server":
        delays = _trace_issue_delays_ns(out_dir / "mlperf_log_trace.json")
        figures.update(
            {
                # LoadGen's issuing thread, its logger and the Python SUT's worker thread
                # (process CPU time over the whole test, including LoadGen's set-up).
                "process_cpu_pct_of_core": round(cpu_s / config["duration_s"] * 100, 1),
                "issue_delay_p50_us": us(pct_or_none(delays, 50), 2),
                "issue_delay_p99_us": us(pct_or_none(delays, 99), 2),
                "issue_delay_max_us": us(float(delays.max()) if delays.size else None, 2),
                "issued_early_fraction": round(float((delays < 0).mean()), 4)
                if delays.size
                else None,
                "scheduled_qps": detail.get("result_scheduled_samples_per_sec"),
                "completed_qps": detail.get("result_completed_samples_per_sec"),
            }
        )
    else:
        figures["samples"] = detail.get("generated_samples_per_query")
        figures["samples_per_s"] = detail.get("result_samples_per_second")
    return figures


def loadgen_settings(lg: Any, config: dict[str, Any]) -> Any:
    """LoadGen's TestSettings for the config's scenario (Server at its rate, or Offline)."""
    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    if config["scenario"] == "server":
        settings.scenario = lg.TestScenario.Server
        settings.server_target_qps = float(config["qps"])
        settings.server_target_latency_ns = 100_000_000
        settings.min_duration_ms = int(config["duration_s"] * 1000)
        settings.max_duration_ms = int(config["duration_s"] * 1000) + 1000
        settings.min_query_count = 1
    else:
        settings.scenario = lg.TestScenario.Offline
        # LoadGen issues expected_qps * min_duration * 1.1 samples in one query.
        settings.min_duration_ms = 1000
        settings.offline_expected_qps = config["samples"] / 1.1
        settings.min_query_count = 1
    return settings


def run_loadgen(config: dict[str, Any]) -> dict[str, Any]:
    """`loadgen_child` in a fresh interpreter; its JSON figures, or {"error": ...}."""
    completed = subprocess.run(
        [sys.executable, "-m", "perf.loadgen_reference", json.dumps(config)],
        cwd=Path(__file__).resolve().parent.parent,  # the repository: `perf` imports there
        capture_output=True,
        text=True,
        timeout=300,
    )
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or "child failed"}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def loadgen_available() -> tuple[str | None, str | None]:
    """(version, None) when `mlperf_loadgen` imports, else (None, reason)."""
    try:
        import mlperf_loadgen  # noqa: F401
    except ImportError as error:
        return None, f"mlperf_loadgen does not import ({error}); pip install mlcommons-loadgen"
    try:
        from importlib.metadata import version

        return version("mlcommons-loadgen"), None
    except Exception:
        return "unknown", None


if __name__ == "__main__":
    print(json.dumps(loadgen_child(json.loads(sys.argv[1]))), flush=True)
