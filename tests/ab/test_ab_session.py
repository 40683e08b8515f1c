"""`collobench ab` end to end, with short real sessions (1-s segments of the shipped A/B demo):
the arms' processes, resident workers, the session's files and run directories, the JSON
contract, an injected slowdown decided `regressed`, and each bad input refused with one line
and exit 2 before any block."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stages.ab.session_files import SessionFiles
from stages.ab.stats.verdict import VERDICTS
from tests.helpers import REPO

pytestmark = pytest.mark.spawns

DEMO = REPO / "specs" / "ab_demo.yaml"
SHORT = ["--set", "pipelines.0.loadgen.duration_s=1", "--set", "pipelines.0.loadgen.warmup_s=0.2"]
CONTRACT_KEYS = (
    "session_id",
    "pipeline",
    "phase",
    "metric",
    "change_pct",
    "change_ci95",
    "verdict",
    "mde_pct",
    "blocks",
    "blocks_dropped",
)


def _ab(home: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLLOBENCH_HOME": str(home)}
    environment.pop("COLLOBENCH_RESULTS_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", "ab", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _variant(tmp_path: Path, ms: float, **changes: Any) -> Path:
    text = DEMO.read_text().replace("config: {ms: 2}", f"config: {{ms: {ms}}}")
    for old, new in changes.items():
        text = text.replace(old, new)
    path = tmp_path / f"variant-{ms}.yaml"
    path.write_text(text)
    return path


def _session_folder(home: Path) -> Path:
    (folder,) = [p for p in (home / "ab").iterdir() if p.is_dir() and p.name != "envs"]
    return folder


def test_an_aa_session_writes_its_files_and_the_json_contract(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _ab(home, str(DEMO), "--aa", *SHORT, "--looks", "4", "--format", "json", "--seed", "7")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {row["metric"] for row in rows} == {"queries_per_s", "latency_p50_ms", "latency_p99_ms"}
    for row in rows:
        assert tuple(row)[: len(CONTRACT_KEYS)] == CONTRACT_KEYS
        assert row["verdict"] in VERDICTS
        assert (row["pipeline"], row["phase"]) == ("crunch", "solo")
        assert row["blocks"] + row["blocks_dropped"] == 4
    folder = _session_folder(home)
    files = SessionFiles(folder)
    record = files.read()
    assert record.status in ("decided", "all_looks")
    assert record.seed == 7 and record.aa and record.block_s and record.machine_class
    segments = files.segments()
    assert [(s.block, s.arm) for s in segments] == [
        (block, arm) for block in range(4) for arm in record.orders[block]
    ]
    assert len({s.seed for s in segments}) == 4  # one seed per block, both arms alike
    for segment in segments:
        manifest = json.loads((Path(segment.run_dir) / "manifest.json").read_text())
        assert f"seed={segment.seed}" in manifest["overrides"]
        assert manifest["status"] == "ok"
    # Resident workers: every segment after an arm's first reused its worker process.
    pids = {
        json.loads((Path(s.run_dir) / "manifest.json").read_text())["results"][0]["pid"]
        for s in segments
        if s.arm == "A"
    }
    assert len(pids) == 1
    assert (folder / "ab.png").stat().st_size > 0
    assert json.loads((home / "ab" / "spread.json").read_text())  # refreshed by the session


def test_a_slower_candidate_is_decided_regressed(tmp_path: Path) -> None:
    """Three times the work per query: decided at 12 blocks even when the suite's other worker
    loads the machine and a few blocks are dropped for its foreign CPU (the exact test needs
    6 kept blocks of one sign; the 5% and 10% figures are perf/ab.py's, on a quiet machine)."""
    home = tmp_path / "home"
    slower = _variant(tmp_path, 6.0)
    done = _ab(
        home,
        str(DEMO),
        str(slower),
        *SHORT,
        "--looks",
        "12",
        "--metric",
        "latency_p50_ms",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    rows = {row["metric"]: row for row in json.loads(done.stdout)}
    p50 = rows["latency_p50_ms"]
    assert p50["verdict"] == "regressed", (p50, done.stderr[-3000:])
    assert p50["change_pct"] > 20.0
    assert p50["change_ci95"][0] > 0.0
    assert "arms differ in spec_hash" in done.stderr
    assert "UNEXPECTED" not in done.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--base-python", "/usr/bin/python3", "--candidate-python", sys.executable],
            "/usr/bin/python3 has no collobench",
        ),
        (["--budget-min", "0.2"], "--budget-min 0.2: too small for the first planned look"),
        (["--looks", "3,8"], "--looks: '3,8': increasing even block counts"),
        (
            ["--aa", "--base-python", sys.executable, "--candidate-python", sys.executable],
            "name two arms one way",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    extra = [] if any(a.startswith("--base") or a == "--aa" for a in arguments) else ["--aa"]
    done = _ab(tmp_path / "home", str(DEMO), *extra, *SHORT, *arguments)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and "warming" not in line]
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_arms_whose_pipelines_differ_are_refused(tmp_path: Path) -> None:
    renamed = _variant(tmp_path, 2, **{"name: crunch": "name: other"})
    done = _ab(tmp_path / "home", str(DEMO), str(renamed), *SHORT)
    assert done.returncode == 2
    assert "arm B runs pipelines ['other'], arm A ['crunch']" in done.stderr


def test_a_duet_runs_both_arms_at_once_on_swapped_halves_of_the_cores(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _ab(home, str(DEMO), "--aa", "--mode", "duet", *SHORT, "--looks", "2", "--seed", "3")
    assert done.returncode == 0, done.stderr
    files = SessionFiles(_session_folder(home))
    record = files.read()
    assert record.mode == "duet" and record.duet_cores == [[0], [1]]
    for block in (0, 1):
        segments = {s.arm: s for s in files.segments() if s.block == block}
        first, second = record.orders[block]
        manifests: dict[str, Any] = {
            str(arm): json.loads((Path(s.run_dir) / "manifest.json").read_text())
            for arm, s in segments.items()
        }
        assert f"pipelines.crunch.placement.cpus={[0]}" in manifests[first]["overrides"]
        assert f"pipelines.crunch.placement.cpus={[1]}" in manifests[second]["overrides"]
        windows = {
            arm: next(e for e in m["timeline"] if e["what"] == "phase")
            for arm, m in manifests.items()
        }
        # Both load windows overlap (one monotonic clock on one machine).
        assert windows["A"]["start_ns"] < windows["B"]["end_ns"]
        assert windows["B"]["start_ns"] < windows["A"]["end_ns"]


def test_a_duet_is_refused_where_the_arms_would_share_cores(tmp_path: Path) -> None:
    pinned = _variant(tmp_path, 2, **{"    stages:": "    placement: {cpus: [0]}\n    stages:"})
    done = _ab(tmp_path / "home", str(pinned), "--aa", "--mode", "duet", *SHORT)
    assert done.returncode == 2
    assert "pins pipelines ['crunch'] to cores itself: the arms would share cores" in done.stderr


def test_ctrl_c_keeps_the_finished_blocks_and_resume_continues(tmp_path: Path) -> None:
    home = tmp_path / "home"
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLLOBENCH_HOME": str(home)}
    environment.pop("COLLOBENCH_RESULTS_DIR", None)
    command = [sys.executable, "-m", "stages.cli", "ab", str(DEMO), "--aa", *SHORT]
    process = subprocess.Popen(
        [*command, "--looks", "4", "--format", "json"],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines = []
    for line in process.stderr:  # interrupt once two blocks are done
        lines.append(line)
        if line.startswith("block 2 "):
            process.send_signal(signal.SIGINT)
            break
    stdout, rest = process.communicate(timeout=120)
    assert process.returncode == 130, "".join(lines) + rest
    rows = json.loads(stdout)  # the verdict on the finished blocks, printed anyway
    assert rows and {row["status"] for row in rows} == {"interrupted"}
    folder = _session_folder(home)
    files = SessionFiles(folder)
    kept = {(s.block, s.arm) for s in files.segments()}
    assert {(0, "A"), (0, "B"), (1, "A"), (1, "B")} <= kept
    assert files.read().status == "interrupted"
    assert not _live_arms(folder)  # no arm or worker process outlived the session
    resumed = _ab(home, str(DEMO), "--resume", folder.name, "--format", "json")
    assert resumed.returncode == 0, resumed.stderr
    assert {row["blocks"] + row["blocks_dropped"] for row in json.loads(resumed.stdout)} == {4}
    blocks = [s.block for s in files.segments()]
    assert sorted(set(blocks)) == list(range(4))
    assert blocks.count(0) == 2  # the finished blocks were not run again


def _live_arms(folder: Path) -> list[int]:
    """Processes whose command line names the session's folder (its arms and their workers)."""
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(str(folder) in part for part in (p.info["cmdline"] or []))
    ]
