"""A stand-in for an inference server's Prometheus endpoint: a loopback HTTP server (port 0, a
thread of the test process) whose `/metrics` is a real `prometheus_client` exposition with
vLLM's metric names, the values moving with every scrape; any other GET answers 200 `{}` (what
an `external` service's ready probe needs). `stop()` kills it mid-run (a dead endpoint)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HITS_PER_SCRAPE = 4
QUERIES_PER_SCRAPE = 10
"""Each scrape adds this many prefix-cache hits and queries: a hit rate of 0.4 between any two."""


class VllmLikeMetrics:
    """vLLM's scheduler and cache series in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.running = Gauge("vllm:num_requests_running", "running", labels, registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", labels, registry=self.registry)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "kv use", labels, registry=self.registry)
        self.queries = Counter(
            "vllm:prefix_cache_queries", "queried blocks", labels, registry=self.registry
        )
        self.hits = Counter("vllm:prefix_cache_hits", "hit blocks", labels, registry=self.registry)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "ttft", labels, registry=self.registry
        )
        self.scrapes = 0

    def render(self) -> bytes:
        """Move every series one step, then expose them."""
        self.scrapes += 1
        model = {"model_name": 'tiny "lm"'}  # a quote, escaped in the exposition
        self.running.labels(**model).set(self.scrapes % 5)
        self.waiting.labels(**model).set(self.scrapes % 3)
        self.kv.labels(**model).set((self.scrapes % 10) / 10)
        self.queries.labels(**model).inc(QUERIES_PER_SCRAPE)
        self.hits.labels(**model).inc(HITS_PER_SCRAPE)
        self.ttft.labels(**model).observe(0.01 * (self.scrapes % 7))
        return generate_latest(self.registry)


class MetricsServer:
    """The stand-in, serving from a daemon thread until `stop()`."""

    def __init__(self) -> None:
        self.metrics = VllmLikeMetrics()
        self.failing = False  # set: /metrics answers 503 (an endpoint that errs, then recovers)
        metrics, server = self.metrics, self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics" and server.failing:
                    self.send_error(503)
                    return
                body = metrics.render() if self.path == "/metrics" else b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop answering and close the port (later scrapes are refused)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
