"""Scrapes a service's Prometheus endpoint (`services[].metrics`) into `server_samples` rows.

One sampler process per service with `metrics`, per phase, started and stopped by the
`SamplerGroup` like the host sampler: never inside the load-generating workers. Each tick GETs
the endpoint over loopback with a timeout, and writes one row per exposed sample (histogram
buckets only when asked) plus Prometheus's own synthetic series: `up` (1: the scrape worked, 0:
it failed, its error in the labels) and `scrape_duration_seconds`. A failed scrape writes only
its `up` 0 row: the gap is in the table, and each gap (consecutive failed scrapes) is also a
manifest warning of code `server_metrics_gap` with its start and end on the run's clock.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.contracts.warnings import RunWarning, WarningCode
from stages.rundir.tables import ChunkWriter
from stages.telemetry.prometheus_text import finite_or_none, is_bucket, parse_exposition
from stages.telemetry.sampler_process import run_periodic

FLUSH_S = 1.0
"""Buffered rows go to a chunk file at least this often (a killed run keeps all but ~1 s)."""
UP = "up"
SCRAPE_DURATION = "scrape_duration_seconds"
_COLUMNS = ("ts_ns", "service", "metric", "labels", "value")
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


@dataclass(frozen=True)
class MetricsTarget:
    """One service's endpoint as its sampler scrapes it; picklable (crosses the spawn)."""

    service: str
    url: str  # the full loopback URL of the endpoint (base URL's origin + `metrics.path`)
    period_ms: float
    timeout_ms: float
    buckets: bool = False


@dataclass
class ServerMetricsResult:
    """What a scraper hands back: counts, and one warning per gap (failed scrapes in a row)."""

    scrapes: int = 0
    failed: int = 0
    rows: int = 0
    samples: int = 0  # ticks, like the other samplers' summaries
    unparsed_lines: int = 0
    warnings: list[RunWarning] = field(default_factory=list)


@dataclass
class _Gap:
    start_ns: int
    end_ns: int
    failures: int
    error: str


class ServerMetricsScraper:
    """Scrapes one target each `scrape()` call and buffers its rows for `writer`."""

    def __init__(
        self,
        target: MetricsTarget,
        writer: ChunkWriter,
        where: dict[str, Any],
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.target = target
        self._writer = writer
        self._where = where  # trial and phase, for the gap warnings
        self._clock_ns = clock_ns
        self._rows: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        self._last_flush_ns = clock_ns()
        self._gap: _Gap | None = None
        self.result = ServerMetricsResult()

    def scrape(self) -> bool:
        """One scrape (always True: a dead endpoint is a gap, never the sampler's end)."""
        ts_ns = self._clock_ns()
        try:
            body = self._get()
        except (OSError, ValueError, http.client.HTTPException) as error:
            self._failed(ts_ns, f"{type(error).__name__}: {error}")
        else:
            self._succeeded(ts_ns, body, (self._clock_ns() - ts_ns) / 1e9)
        self.result.samples += 1
        if self._clock_ns() - self._last_flush_ns >= FLUSH_S * 1e9:
            self.flush()
        return True

    def _get(self) -> str:
        request = urllib.request.Request(self.target.url, headers={"Accept": _ACCEPT})
        # Loopback only (checked with the spec), so no proxy may intercept it.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=self.target.timeout_ms / 1000) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            return str(response.read().decode("utf-8", errors="replace"))

    def _succeeded(self, ts_ns: int, body: str, duration_s: float) -> None:
        self._close_gap()
        samples, bad = parse_exposition(body)
        self.result.scrapes += 1
        self.result.unparsed_lines += bad
        for sample in samples:
            if self.target.buckets or not is_bucket(sample):
                self._add(ts_ns, sample.metric, sample.labels, finite_or_none(sample.value))
        self._add(ts_ns, UP, {}, 1.0)
        self._add(ts_ns, SCRAPE_DURATION, {}, duration_s)

    def _failed(self, ts_ns: int, error: str) -> None:
        self.result.failed += 1
        self._add(ts_ns, UP, {"error": error}, 0.0)
        if self._gap is None:
            self._gap = _Gap(ts_ns, ts_ns, 0, error)
        self._gap.end_ns = ts_ns
        self._gap.failures += 1
        self._gap.error = error

    def _close_gap(self) -> None:
        gap, self._gap = self._gap, None
        if gap is None:
            return
        target = self.target
        seconds = (gap.end_ns - gap.start_ns) / 1e9
        message = (
            f"server metrics of service '{target.service}' ({target.url}): "
            f"{gap.failures} scrape(s) failed over {seconds:.1f} s "
            f"(trial {self._where['trial']}, phase {self._where['phase']}; last: {gap.error})"
        )
        details = {
            "service": target.service,
            **self._where,
            "start_ns": gap.start_ns,
            "end_ns": gap.end_ns,
            "failed_scrapes": gap.failures,
            "error": gap.error,
        }
        self.result.warnings.append(RunWarning(message, WarningCode.SERVER_METRICS_GAP, details))

    def _add(self, ts_ns: int, metric: str, labels: dict[str, str], value: float | None) -> None:
        row = (ts_ns, self.target.service, metric, json.dumps(labels, sort_keys=True), value)
        for name, item in zip(_COLUMNS, row, strict=True):
            self._rows[name].append(item)
        self.result.rows += 1

    def flush(self) -> None:
        """Write the buffered rows as one chunk file (nothing when empty)."""
        if self._rows["ts_ns"]:
            self._writer.write_columns(self._rows)
            self._rows = {name: [] for name in _COLUMNS}
        self._last_flush_ns = self._clock_ns()

    def close(self) -> ServerMetricsResult:
        """Flush, and report a gap still open (the endpoint never came back)."""
        self.flush()
        self._close_gap()
        return self.result


def server_metrics_main(
    run_dir: str,
    keys: dict[str, Any],
    label: str,
    target: MetricsTarget,
    stop_event: Any,
    on_first_sample: Callable[[], object] | None = None,
) -> ServerMetricsResult:
    """Sampler process entry: scrape `target` every `period_ms` until stopped (then once
    more); `keys` are run_id, trial and phase."""
    writer = ChunkWriter(Path(run_dir), "server_samples", label, keys)
    writer.warm_up()  # Parquet's one-time set-up now, not during the measured window
    where = {"trial": keys["trial"], "phase": keys["phase"]}
    scraper = ServerMetricsScraper(target, writer, where)
    try:
        run_periodic(scraper.scrape, stop_event, target.period_ms, on_first_tick=on_first_sample)
    finally:
        result = scraper.close()
    return result
