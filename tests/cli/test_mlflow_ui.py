"""A collocated run shows up in the real MLflow UI server as a parent run with child runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from stages.cli.mlflow_log import log_run_to_mlflow
from stages.cli.wiring import summarize_phase
from tests.helpers import LOOPBACK, listening_addresses, run, spec_doc
from tests.reliability import figures

# A real run logged to MLflow, then `mlflow ui` started and read over HTTP.
pytestmark = [pytest.mark.slow, pytest.mark.spawns]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.load(response))


def test_mlflow_ui_lists_parent_and_child_runs(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run(
        spec_doc({"type": "noop"}, duration_s=0.5),
        tmp_path,
        mlflow_uri=store,
        summarize_phase=summarize_phase,  # as `collobench run` does
        log_to_mlflow=log_run_to_mlflow,
    )
    assert result.mlflow_run_id is not None
    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "ui",
            "--backend-store-uri",
            store,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/", timeout=2) as page:
                    assert page.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "mlflow ui did not start"
                time.sleep(0.5)
        listening = listening_addresses(server.pid)  # the ui and its gunicorn/uvicorn workers
        assert listening and all(address in LOOPBACK for address, _ in listening), listening
        figures.count("security_checks", "mlflow_ui_binds_loopback")
        experiments = post(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 10})
        (experiment,) = [e for e in experiments["experiments"] if e["name"] == "collobench"]
        found = post(
            f"{base}/api/2.0/mlflow/runs/search",
            {"experiment_ids": [experiment["experiment_id"]], "max_results": 50},
        )
        runs = found["runs"]
        by_id = {r["info"]["run_id"]: r for r in runs}
        parent = by_id[result.mlflow_run_id]
        assert parent["info"]["run_name"] == result.run_id
        children = [
            r
            for r in runs
            if {"key": "mlflow.parentRunId", "value": result.mlflow_run_id}
            in r["data"].get("tags", [])
        ]
        assert len(children) == 2  # victim and survivor, collocated (no solo baselines)
        metrics = {m["key"] for child in children for m in child["data"].get("metrics", [])}
        assert {"queries_per_s", "latency_p99_ms", "queries_ok"} <= metrics
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
