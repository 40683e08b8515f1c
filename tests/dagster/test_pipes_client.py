"""The Pipes client ends the child's whole process group: grandchildren included, SIGKILL when
SIGTERM is ignored, nothing left behind; the Pipes child reads the CLI's output to the end
when its own stdout is gone (the client's process died)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from bench_defs.core.pipes_runner import manifest_metadata, relay, summary_markdown
from stages.process_groups import end_group, group_alive

IGNORES_SIGTERM = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def _tree(
    process: subprocess.Popen[bytes], count: int, name: str | None = None
) -> list[psutil.Process]:
    """The process and its descendants, once `count` of them exist (and, with `name`, have
    exec'd that program: a child caught between fork and exec may not act on SIGTERM yet)."""
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            children = parent.children(recursive=True)
            if len(children) >= count and all(
                name is None or child.name() == name for child in children
            ):
                break
        time.sleep(0.05)
    return [parent, *parent.children(recursive=True)]


def _gone(processes: list[psutil.Process]) -> bool:
    return all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in processes)


# SIGTERM at its default action and unblocked, whatever this test process inherited or set (an
# ignored or blocked signal survives exec), then the shell with two background sleeps.
SH_WITH_TWO_SLEEPS = (
    "import os, signal\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})\n"
    "os.execvp('sh', ['sh', '-c', 'sleep 60 & sleep 60 & wait'])\n"
)


def _signal_state(processes: list[psutil.Process]) -> list[str]:
    """SigBlk and SigIgn of each process, for the failure message."""
    states = []
    for process in processes:
        with contextlib.suppress(OSError):
            lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
            states.append(" ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn"))))
    return states


@pytest.mark.spawns
def test_sigterm_ends_the_child_and_its_grandchildren() -> None:
    process = subprocess.Popen([sys.executable, "-c", SH_WITH_TWO_SLEEPS], start_new_session=True)
    tree = _tree(process, 2, name="sleep")
    assert len(tree) == 3
    states = _signal_state(tree)
    started = time.monotonic()
    end_group(process, grace_s=10)
    assert time.monotonic() - started < 5, states  # SIGTERM was enough
    assert _gone(tree) and not group_alive(process.pid)


@pytest.mark.spawns
def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    process = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], start_new_session=True)
    tree = _tree(process, 1)
    time.sleep(0.5)  # both have installed their SIG_IGN
    started = time.monotonic()
    end_group(process, grace_s=1.0)
    assert 0.9 < time.monotonic() - started < 10
    assert _gone(tree) and not group_alive(process.pid)


def test_manifest_becomes_typed_metadata() -> None:
    results = [
        {
            "trial": 0,
            "phase": "collocated",
            "pipeline": "a",
            "status": "ok",
            "ok": 10,
            "slo_verdict": "missed",
            "summary": {
                "queries_ok": 10,
                "queries_per_s": 99.5,
                "queries_per_s_ci_low": 90.0,
                "queries_per_s_ci_high": 110.0,
                "latency_p50_ms": 1.5,
                "latency_p99_ms": float("inf"),
            },
        }
    ]
    manifest = {
        "run_id": "r1",
        "status": "ok",
        "spec_hash": "ab" * 32,
        "spec": {"pipelines": [{"name": "a", "device": "cpu"}]},
        "energy": {"gpu_source": None, "host_source": "rapl"},
        "overrides": ["repeats=2"],
        "warnings": [],
        "results": results,
    }
    from pathlib import Path

    metadata = manifest_metadata(manifest, Path("/runs/r1"), 0)
    assert metadata["energy_source"]["raw_value"] == "rapl"
    assert metadata["overrides"] == {"raw_value": ["repeats=2"], "type": "json"}
    assert metadata["a/queries_per_s"] == {"raw_value": 99.5, "type": "float"}
    assert "a/p99_ms" not in metadata  # an infinite percentile is no float to plot
    assert "| 0 | collocated | a | ok | 10 | 99.5 [90, 110] | 1.5 | inf | missed |" in (
        summary_markdown(results)
    )


class _BrokenPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_relay_reads_the_cli_to_the_end_when_its_stdout_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crashed Celery worker closes the pipe the runner writes to: the runner keeps reading
    the CLI (which would otherwise fail writing its own output while it winds down)."""
    monkeypatch.setattr(sys, "stdout", _BrokenPipe())
    logged: list[str] = []
    process: Any = SimpleNamespace(stdout=iter(["phase 1 ends\n", "interrupted: parent died\n"]))
    relay(process, SimpleNamespace(log=SimpleNamespace(info=logged.append)))  # type: ignore[arg-type]
    sys.stdout.close()  # the runner's /dev/null
    assert logged == ["phase 1 ends", "interrupted: parent died"]


def test_relay_logs_progress_records_at_their_level_and_error_lines_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stages.contracts.progress import ProgressRecord

    records = [
        ProgressRecord(event="phase_start", message="trial 0 · solo: a"),
        ProgressRecord(event="warning", message="a warning", level="warning"),
    ]
    lines = [record.to_line() for record in records] + ["spec.yaml: no such mode\n", "\n"]
    logged: list[tuple[str, str]] = []
    log = SimpleNamespace(
        info=lambda text: logged.append(("info", text)),
        warning=lambda text: logged.append(("warning", text)),
    )
    relay(SimpleNamespace(stdout=iter(lines)), SimpleNamespace(log=log))  # type: ignore[arg-type]
    assert logged == [
        ("info", "trial 0 · solo: a"),
        ("warning", "a warning"),
        ("info", "spec.yaml: no such mode"),
    ]
    assert capsys.readouterr().out == "trial 0 · solo: a\na warning\nspec.yaml: no such mode\n\n"
