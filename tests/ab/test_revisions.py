"""Revision arms and bisect on a repository the test builds (`stage_repo`): a commit that makes
the user's stage slower is decided `regressed` with an interval about its size, bisect names the
one slow commit among eight, and a bad revision or a dirty repository is refused with one line
and exit 2 before any block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.ab.bisect import commits_between
from stages.ab.revisions import RevisionError, check_repository, revision_environment
from tests.ab.stage_repo import stage_repository
from tests.helpers import REPO

pytestmark = pytest.mark.spawns


def _cli(home: Path, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLLOBENCH_HOME": str(home)}
    environment.pop("COLLOBENCH_RESULTS_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_a_commit_that_slows_the_stage_by_10pct_is_regressed(tmp_path: Path) -> None:
    repo, _ = stage_repository(tmp_path / "repo", [1.0, 1.1])
    done = _cli(
        tmp_path / "home",
        "ab",
        str(repo / "spec.yaml"),
        "--repo",
        str(repo),
        "--base",
        "HEAD~1",
        "--candidate",
        "HEAD",
        "--metric",
        "latency_p50_ms",
        "--looks",
        "8,16",
        "--boundary",
        "pocock",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["verdict"] == "regressed", row
    low, high = row["change_ci95"]
    # One query at a time: p50 is the stage's work, 10% more of it (a little less: the
    # harness's own few microseconds per query do not grow).
    assert low < 10.0 * 1.5 and high > 10.0 / 1.5, row
    assert "arms differ in git_commit" in done.stderr
    assert "UNEXPECTED" not in done.stderr


def test_bisect_names_the_one_slow_commit_among_eight(tmp_path: Path) -> None:
    factors = [1.0, 1.0, 1.0, 1.0, 1.0, 1.25, 1.25, 1.25, 1.25]  # commits 1-8 after the good 0
    repo, commits = stage_repository(tmp_path / "repo", factors)
    done = _cli(
        tmp_path / "home",
        "bisect",
        str(repo / "spec.yaml"),
        "--repo",
        str(repo),
        "--good",
        commits[0],
        "--bad",
        "HEAD",
        "--metric",
        "latency_p50_ms",
        "--looks",
        "8,16",
        "--boundary",
        "pocock",
        "--margin-pct",
        "10",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["commits"] == 8
    assert document["first_regressed"] == commits[5], document
    assert len(document["steps"]) == 3  # log2(8) sessions, each against the good commit
    (last,) = [s for s in document["steps"] if s["commit"] == commits[5]]
    assert last["verdict"] == "regressed" and last["change_ci95"][0] > 0.0


def test_bad_revisions_and_dirty_repositories_are_refused(tmp_path: Path) -> None:
    repo, commits = stage_repository(tmp_path / "repo", [1.0, 1.1])
    home = tmp_path / "home"
    arms = ["ab", str(repo / "spec.yaml"), "--repo", str(repo)]
    done = _cli(home, *arms, "--base", "nosuchrev", "--candidate", "HEAD")
    assert done.returncode == 2
    assert done.stderr.strip() == f"--base: revision 'nosuchrev' does not exist in {repo}"
    (repo / "abslow.py").write_text("# an edit nobody committed\n")
    done = _cli(home, *arms, "--base", "HEAD~1", "--candidate", "HEAD")
    assert done.returncode == 2
    assert "has uncommitted changes" in done.stderr and "--allow-dirty" in done.stderr
    assert check_repository(repo, allow_dirty=True) is True
    with pytest.raises(RevisionError, match="not an ancestor"):
        commits_between(repo, commits[1], commits[0], allow_dirty=True)
    assert not (home / "ab" / "envs").exists()  # refused before anything was built


def test_a_revision_environment_is_built_once_and_runs_the_commits_code(tmp_path: Path) -> None:
    repo, commits = stage_repository(tmp_path / "repo", [1.0, 1.7])
    envs = tmp_path / "envs"
    environment = revision_environment(repo, commits[1], envs)
    probe = subprocess.run(
        [
            str(environment.python),
            "-c",
            "import abslow, stages, importlib.metadata as m; print(abslow.FACTOR); "
            "print([e.value for e in m.entry_points(group='collobench.stages') "
            "if e.name == 'ab_slow'])",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert probe.stdout.split("\n")[:2] == ["1.7", "['abslow:SlowStage']"]
    stamp = (environment.folder / ".ready").stat().st_mtime_ns
    assert revision_environment(repo, commits[1], envs) == environment
    assert (environment.folder / ".ready").stat().st_mtime_ns == stamp  # reused, not rebuilt
