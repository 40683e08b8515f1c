"""Arms from two git revisions of a repository (`collobench ab --repo DIR --base REV
--candidate REV`, and every step of `collobench bisect`).

Each commit becomes a worktree and an environment, built the same way for both arms and kept
for the next session, under `ab/envs/<repo>-<commit12>/`:

- `src/`: `git worktree add --detach` of the commit;
- `venv/`: a venv of the controller's base Python that sees the controller's packages (a `.pth`
  that adds its site-packages, so torch and collobench are not installed again) and, installed
  in front of them, the worktree (`pip install --no-deps --no-build-isolation -e src`), so its
  modules and entry points (its `collobench.stages`) are the commit's. When the repository is
  collobench itself, the commit's collobench shadows the controller's the same way.

The first session pays a worktree and an editable install per commit (seconds for a small
package); later sessions reuse them (`.ready` marks a finished one). The arm runs in its
worktree, so the run's recorded `git_commit` is the commit's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from stages.ab.arm_process import ArmSetup
from stages.contracts.errors import InvalidInputError

READY_MARK = ".ready"
BASE_PTH = "_collobench_ab_base.pth"  # after `__editable__*`: the worktree's install comes first
REVISION_FINGERPRINTS = {"git_commit", "git_dirty", "packages_sha256", "collobench_version"}
"""The fingerprint fields two revision arms are expected to differ in."""


class RevisionError(InvalidInputError):
    """A repository or a revision that cannot make an arm: not a repository, no such commit,
    uncommitted changes, an environment that does not build."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=120
    )


def resolve_commit(repo: Path, revision: str, option: str) -> str:
    """The full hash of `revision` in `repo`; RevisionError naming `option` when there is none."""
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if found.returncode != 0:
        raise RevisionError(f"{option}: revision {revision!r} does not exist in {repo}")
    return found.stdout.strip()


def check_repository(repo: Path, allow_dirty: bool) -> bool:
    """Whether `repo` has uncommitted changes (allowed only with --allow-dirty, recorded);
    RevisionError for a folder that is not a git work tree."""
    inside = _git(repo, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise RevisionError(f"--repo: {repo} is not a git work tree")
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    dirty = bool(status.stdout.strip())
    if dirty and not allow_dirty:
        raise RevisionError(
            f"--repo: {repo} has uncommitted changes (git status): the arms run committed "
            "revisions, so commit them, or pass --allow-dirty"
        )
    return dirty


@dataclass(frozen=True)
class RevisionEnvironment:
    """One commit's worktree and venv."""

    commit: str
    folder: Path

    @property
    def source(self) -> Path:
        return self.folder / "src"

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"


def _run_step(command: list[str], what: str, log: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RevisionError(f"{what} failed: {last[0][:300]} (log: {log})")


def revision_environment(repo: Path, commit: str, envs_dir: Path) -> RevisionEnvironment:
    """The commit's worktree and venv, built now unless an earlier session built them."""
    environment = RevisionEnvironment(commit, envs_dir / f"{repo.resolve().name}-{commit[:12]}")
    if (environment.folder / READY_MARK).exists():
        return environment
    if environment.folder.exists():  # a build cut short: start again
        _git(repo, "worktree", "remove", "--force", str(environment.source))
        shutil.rmtree(environment.folder, ignore_errors=True)
    environment.folder.mkdir(parents=True)
    log = environment.folder / "build.log"
    _run_step(
        ["git", "-C", str(repo), "worktree", "add", "--detach", str(environment.source), commit],
        f"git worktree add of {commit[:12]}",
        log,
    )
    venv = environment.folder / "venv"
    _run_step([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv", log)
    site = subprocess.run(
        [
            str(environment.python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    controller_site = sysconfig.get_paths()["purelib"]
    (Path(site) / BASE_PTH).write_text(f"import site; site.addsitedir({controller_site!r})\n")
    if (environment.source / "pyproject.toml").exists() or (
        environment.source / "setup.py"
    ).exists():
        _run_step(
            [
                str(environment.python),
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-build-isolation",
                "--no-input",
                "--disable-pip-version-check",
                "-q",
                "-e",
                str(environment.source),
            ],
            f"pip install -e of {commit[:12]}",
            log,
        )
    (environment.folder / READY_MARK).write_text(commit + "\n")
    return environment


def _spec_in(spec: Path, repo: Path, environment: RevisionEnvironment) -> Path:
    """A spec inside the repository is read from the arm's own worktree."""
    try:
        return environment.source / spec.resolve().relative_to(repo.resolve())
    except ValueError:
        return spec


def revision_arm(
    label: str,
    repo: Path,
    revision: str,
    option: str,
    spec: Path,
    overrides: tuple[str, ...],
    envs_dir: Path,
) -> ArmSetup:
    """The arm that runs `spec` with `revision` of `repo` installed."""
    commit = resolve_commit(repo, revision, option)
    environment = revision_environment(repo, commit, envs_dir)
    return ArmSetup(
        label,
        str(environment.python),
        _spec_in(spec, repo, environment),
        overrides,
        # The worktree's code, not a PYTHONPATH the controller was started with, comes first.
        extra_env={"PYTHONPATH": ""},
        description=f"{repo}@{revision} ({commit[:12]})",
        revision=commit,
        cwd=str(environment.source),
    )


def revision_arms(
    repo: Path,
    base: str,
    candidate: str,
    spec: Path,
    overrides: tuple[str, ...],
    envs_dir: Path,
    allow_dirty: bool,
) -> tuple[ArmSetup, ArmSetup, bool]:
    """Arms A (`base`) and B (`candidate`) of `repo`, and whether it had uncommitted changes;
    every check runs before anything is built."""
    dirty = check_repository(repo, allow_dirty)
    resolve_commit(repo, base, "--base")
    resolve_commit(repo, candidate, "--candidate")
    return (
        revision_arm("A", repo, base, "--base", spec, overrides, envs_dir),
        revision_arm("B", repo, candidate, "--candidate", spec, overrides, envs_dir),
        dirty,
    )
