"""Services in real runs (launcher, spawned workers, a `command` stub server): every stage sees
its phase's service URL, the server's processes are sampled as scope 'service', and a server
that dies during a load window stops the pipelines that use it at once, failed with its
reason, their rows kept, no process left."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from analysis.warehouse.loader import load_runs
from stages.rundir.tables import read_table
from tests.analysis.rundirs import rows_of
from tests.collocation.service_stages import PROBE_TYPE, install_service_probe
from tests.helpers import run

pytestmark = pytest.mark.spawns  # every test here starts a process

STUB = str(Path(__file__).parents[1] / "services" / "stub_service.py")


@pytest.fixture(autouse=True)
def _probe_and_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")
    install_service_probe(tmp_path, monkeypatch)


def probe_pipeline(name: str, report: Path, **loadgen: Any) -> dict[str, Any]:
    stage = {
        "id": "probe",
        "type": PROBE_TYPE,
        "config": {"service": "stub", "report_to": str(report)},
    }
    return {"name": name, "loadgen": {"type": "server", "rate": 50, **loadgen}, "stages": [stage]}


def stub_service(*flags: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": "stub",
        "type": "command",
        "command": [sys.executable, STUB, "{port}", "--child", *flags],
        "ready": {"path": "/health", "timeout_s": 20},
        **fields,
    }


def stub_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if STUB in (process.info["cmdline"] or []) and process.status() != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow
def test_stages_see_each_phases_service_and_it_is_sampled(tmp_path: Path) -> None:
    """A `per_phase` stub: three phases (solo a, solo b, collocated), a new server and port in
    each; every stage's context holds that phase's URL, which answers; the host samples carry
    the phase's server as scope 'service', pipeline 'stub', pid the server's."""
    report = tmp_path / "seen.jsonl"
    doc = {
        "name": "served",
        "telemetry": {"host": {"period_ms": 100}},
        "pipelines": [
            probe_pipeline("a", report, duration_s=0.6),
            probe_pipeline("b", report, duration_s=0.6),
        ],
        "services": [stub_service(restart="per_phase")],
    }
    result = run(doc, tmp_path / "runs")
    assert result.status == "ok", result.warnings
    seen = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(seen) == 4 and all(line["health"] == 200 for line in seen)
    assert all(set(line["service_urls"]) == {"stub"} for line in seen)
    urls = [line["service_urls"]["stub"] for line in seen]
    assert len(set(urls)) == 3  # solo a, solo b, then both collocated on one server
    log = (result.run_dir / "services" / "stub.log").read_text()
    server_pids = [int(pid) for pid in re.findall(r"stub service pid (\d+)", log)]
    assert len(server_pids) == 3
    samples = read_table(result.run_dir, "host_samples").to_pylist()
    service_rows = [row for row in samples if row["scope"] == "service"]
    assert {row["pipeline"] for row in service_rows} == {"stub"}
    by_phase = {(row["phase"], row["pid"]) for row in service_rows}
    assert {pid for _, pid in by_phase} == set(server_pids)
    assert {phase for phase, _ in by_phase} == {"solo", "collocated"}
    # The server is not counted in the harness's rows: its RSS (the stub and its child) is
    # its own, and the harness tree stops at it.
    assert all((row["rss_mib"] or 0) > 10 for row in service_rows)
    worker_pids = {row["pid"] for row in samples if row["scope"] == "process"}
    assert not worker_pids & set(server_pids)
    assert stub_processes() == []


@pytest.mark.slow
def test_a_service_dying_mid_window_stops_its_users_at_once(tmp_path: Path) -> None:
    """The stub exits (status 1) 8 s after it started, in a 60 s load window: the pipeline
    using it is failed with the service's reason within seconds, the other one finishes
    its 4 s ok, the user's rows load, and no process is left."""
    report = tmp_path / "seen.jsonl"
    doc = {
        "name": "served",
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 100}},
        "pipelines": [
            probe_pipeline("user", report, duration_s=60),
            {
                "name": "other",
                "loadgen": {"type": "server", "rate": 50, "duration_s": 4},
                "stages": [{"id": "s", "type": "noop"}],
            },
        ],
        "services": [stub_service("--exit-after", "8")],
    }
    result = run(doc, tmp_path / "runs")
    assert result.status == "failed"
    outcomes = {outcome.pipeline: outcome for outcome in result.results}
    user = outcomes["user"]
    assert user.status == "failed"
    assert user.error.startswith("service stub exited with status 1: stub service exits as told")
    assert outcomes["other"].status == "ok" and outcomes["other"].error is None
    assert sum("service stub exited with status 1" in line for line in result.warnings) == 1
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    phase = next(entry for entry in manifest["timeline"] if entry["what"] == "phase")
    assert (phase["end_ns"] - phase["start_ns"]) / 1e9 < 30  # well before the 60 s window
    db_path = tmp_path / "warehouse.duckdb"
    load_runs([result.run_dir], db_path)
    counts = {
        row["pipeline"]: row["n"]
        for row in rows_of(db_path, "SELECT pipeline, count(*) AS n FROM queries GROUP BY ALL")
    }
    assert counts.get("user", 0) > 10 and counts.get("other", 0) > 10
    assert stub_processes() == []
    assert not alive(user.pid) and not alive(outcomes["other"].pid)
