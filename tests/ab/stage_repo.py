"""A small git repository of a user's stage package, built by the revision and bisect tests:
`abslow`, one stage type (`ab_slow`, registered through the `collobench.stages` entry point),
the builtin `busy` stage doing FACTOR times its work; each commit sets FACTOR."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "abslow"
version = "0.1.0"

[project.entry-points."collobench.stages"]
ab_slow = "abslow:SlowStage"

[tool.setuptools]
py-modules = ["abslow"]
"""
MODULE = '''\
"""The builtin busy stage with FACTOR times its work: a stage whose speed a commit changes."""

from stages.library.core.builtin import BusyStage

FACTOR = {factor!r}


class SlowStage(BusyStage):
    """`busy`, FACTOR times the work per query."""

    def prepare(self) -> None:
        super().prepare()
        self._iterations = round(self._iterations * FACTOR)
'''
SPEC = """\
# One query at a time on the package's stage (the A/B demo's shape, the user's stage type).
name: ab-slow
seed: 1
pipelines:
  - name: crunch
    loadgen: {type: closed_loop, concurrency: 1, duration_s: 1, warmup_s: 0.2}
    stages:
      - {id: work, type: ab_slow, config: {ms: 2}}
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def stage_repository(folder: Path, factors: list[float]) -> tuple[Path, list[str]]:
    """The repository at `folder`, one commit per factor (the first adds the package), and its
    commits oldest first; `spec.yaml` in it runs the stage."""
    folder.mkdir(parents=True)
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "config", "user.email", "test@example.invalid")
    _git(folder, "config", "user.name", "test")
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "spec.yaml").write_text(SPEC)
    commits = []
    for index, factor in enumerate(factors):
        (folder / "abslow.py").write_text(textwrap.dedent(MODULE.format(factor=factor)))
        (folder / "CHANGES").write_text(f"commit {index}\n")
        _git(folder, "add", "-A")
        _git(folder, "commit", "-q", "-m", f"commit {index}: factor {factor}")
        commits.append(_git(folder, "rev-parse", "HEAD"))
    return folder, commits
