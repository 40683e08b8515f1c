"""`collobench bisect`: the first commit between a good and a bad revision whose change is
decided `regressed`. A binary search over `git rev-list --ancestry-path good..bad`; each step
is an A/B session (`session_plan.run_session`) of the middle commit against the known good
commit. A step that stays undecided ends the search, named as such: the answer is never
guessed, and the range that still holds the change is reported instead."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stages.ab.revisions import RevisionError, check_repository, resolve_commit
from stages.ab.session_plan import CompletedSession

StepVerdict = Literal["regressed", "unchanged", "undecided"]
RunStep = Callable[[str], CompletedSession]
"""Runs the A/B session of one candidate commit against the good commit."""


@dataclass(frozen=True)
class BisectStep:
    """One session of the search."""

    commit: str
    subject: str
    session_id: str
    verdict: StepVerdict
    figure: str | None  # the figure that decided `regressed` (the largest change), else None
    change_pct: float | None
    change_ci95: tuple[float, float] | None


@dataclass
class BisectResult:
    """Where the search ended."""

    good: str
    bad: str
    commits: list[str]
    steps: list[BisectStep] = field(default_factory=list)
    first_regressed: BisectStep | None = None
    undecided: BisectStep | None = None
    range_left: tuple[str, str] | None = None
    """(last commit known not to regress, first known or assumed to): where it must lie."""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise RevisionError(f"git {' '.join(args)} in {repo}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def commits_between(
    repo: Path, good: str, bad: str, allow_dirty: bool
) -> tuple[str, str, list[str]]:
    """The good and bad commits' hashes and the commits after good up to bad, oldest first;
    RevisionError when good is not an ancestor of bad, or nothing lies between."""
    check_repository(repo, allow_dirty)
    good_sha = resolve_commit(repo, good, "--good")
    bad_sha = resolve_commit(repo, bad, "--bad")
    ancestor = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", good_sha, bad_sha],
        capture_output=True,
        check=False,
        timeout=60,
    )
    if ancestor.returncode != 0 or good_sha == bad_sha:
        raise RevisionError(f"--good {good} is not an ancestor of --bad {bad} in {repo}")
    commits = _git(repo, "rev-list", "--ancestry-path", "--reverse", f"{good_sha}..{bad_sha}")
    return good_sha, bad_sha, commits.split()


def step_verdict(
    session: CompletedSession,
) -> tuple[StepVerdict, str | None, float | None, tuple[float, float] | None]:
    """A session's answer to "did this commit regress?": `regressed` when a figure did (the
    largest such change reported), `unchanged` when every figure is decided otherwise
    (equivalent or improved), else `undecided`."""
    verdicts = session.judgement.verdicts
    regressed = [v for v in verdicts if v.verdict == "regressed"]
    if regressed:
        worst = max(regressed, key=lambda v: abs(v.change_pct))
        return "regressed", worst.figure, worst.change_pct, worst.change_ci95
    if verdicts and all(v.verdict in ("equivalent", "improved") for v in verdicts):
        return "unchanged", None, None, None
    return "undecided", None, None, None


def bisect(
    repo: Path,
    good: str,
    bad: str,
    allow_dirty: bool,
    run_step: RunStep,
    say: Callable[[str], None],
) -> BisectResult:
    """Search the commits after `good` up to `bad` (see the module docstring)."""
    good_sha, bad_sha, commits = commits_between(repo, good, bad, allow_dirty)
    result = BisectResult(good_sha, bad_sha, commits)
    low, high = -1, len(commits) - 1  # commits[low] is not regressed (-1: good itself)
    high_decided: BisectStep | None = None  # the session that decided commits[high]
    say(f"bisect: {len(commits)} commits after {good_sha[:12]} up to {bad_sha[:12]}")
    while True:
        if high - low <= 1 and high_decided is not None:
            result.first_regressed = high_decided
            return result
        middle = (low + high + 1) // 2 if high - low > 1 else high
        commit = commits[middle]
        say(f"bisect: step {len(result.steps) + 1}: {commit[:12]} against {good_sha[:12]}")
        session = run_step(commit)
        verdict, figure, change, interval = step_verdict(session)
        step = BisectStep(
            commit,
            _git(repo, "log", "-1", "--format=%s", commit),
            session.record.session_id,
            verdict,
            figure,
            change,
            interval,
        )
        result.steps.append(step)
        say(f"bisect: {commit[:12]} {verdict}")
        if verdict == "undecided":
            result.undecided = step
            result.range_left = (commits[low] if low >= 0 else good_sha, commits[high])
            return result
        if verdict == "regressed":
            high, high_decided = middle, step
        else:
            low = middle
            if low == len(commits) - 1:  # bad itself did not regress against good
                return result
