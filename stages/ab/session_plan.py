"""From what the user asked (`SessionRequest`, the CLI's options) to a finished session: the
arms' setups, the checks before any block (the arms' Pythons run collobench, their pipelines
match, the budget holds the first look), the warm-up, the plan, the blocks, and the arms
stopped whatever happens."""

from __future__ import annotations

import datetime as dt
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stages.ab.arm_process import ArmProcess, ArmSetup
from stages.ab.judgement import Judgement
from stages.ab.session_files import ArmRecord, SessionFiles, SessionRecord
from stages.ab.session_runner import ReadSegment, SessionRunner
from stages.ab.spread_store import SpreadStore
from stages.ab.stats.block_orders import balanced_orders
from stages.ab.stats.looks import plan_looks
from stages.contracts.errors import InvalidInputError

Say = Callable[[str], None]


class ArmsDifferError(InvalidInputError):
    """The two arms do not run the same pipelines: there is nothing to pair."""


class AbOptionsError(InvalidInputError):
    """Options that do not describe two arms."""


@dataclass
class SessionRequest:
    """What `collobench ab` was asked (see its options)."""

    spec: Path
    session_id: str
    ab_dir: Path
    seed: int
    controller_python: str = sys.executable
    """The Python of arms that name none (specs, --aa)."""
    spec_b: Path | None = None
    aa: bool = False
    base_python: Path | None = None
    candidate_python: Path | None = None
    overrides: list[str] = field(default_factory=list)
    margin_pct: float = 5.0
    budget_min: float = 15.0
    looks: str = "12,24,36"
    boundary: str = "obrien-fleming"
    resume: str | None = None
    repo: Path | None = None
    base: str | None = None
    candidate: str | None = None
    allow_dirty: bool = False
    repo_dirty: bool = False
    """Found by the checks: the revision arms' repository had uncommitted changes."""
    pipeline: str | None = None
    metric: str | None = None
    mode: str = "interleaved"
    cores: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    """The cores this session may use (duet splits them between the arms)."""


class DuetRefusedError(InvalidInputError):
    """Duet would measure something else than each arm: a shared GPU, shared cores."""


def duet_cores(request: SessionRequest, hellos: dict[str, dict[str, object]]) -> list[list[int]]:
    """The two halves of the cores, one per arm; DuetRefusedError where a duet would measure
    the arms' contention instead of each arm: a GPU both arms would share, a spec that pins
    its own cores (the arms' cores would overlap), fewer than two cores."""
    for label, hello in hellos.items():
        devices = [str(d) for d in hello.get("devices", [])]  # type: ignore[attr-defined]
        if any(not device.startswith("cpu") for device in devices):
            raise DuetRefusedError(
                f"--mode duet: arm {label} runs on {', '.join(devices)}: both arms would share "
                "one accelerator and measure their contention; use the interleaved mode"
            )
        if hello.get("pinned"):
            raise DuetRefusedError(
                f"--mode duet: arm {label} pins pipelines {hello['pinned']} to cores itself: "
                "the arms would share cores; drop placement.cpus or use the interleaved mode"
            )
    cores = sorted(request.cores)
    if len(cores) < 2:
        raise DuetRefusedError(f"--mode duet: needs two cores or more, this session has {cores}")
    half = len(cores) // 2
    return [cores[:half], cores[half : 2 * half]]


@dataclass
class CompletedSession:
    """A session's record, files and last judgement."""

    files: SessionFiles
    record: SessionRecord
    judgement: Judgement
    look_alpha: float
    phase: str


def parse_looks(text: str) -> list[int]:
    """`8,16,24` -> [8, 16, 24]: increasing even block counts of at least 2."""
    try:
        looks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise AbOptionsError(f"--looks: {text!r} is not a list of block counts") from None
    if not looks or any(n < 2 or n % 2 for n in looks) or looks != sorted(set(looks)):
        raise AbOptionsError(f"--looks: {text!r}: increasing even block counts of at least 2")
    return looks


def arm_setups(request: SessionRequest) -> tuple[ArmSetup, ArmSetup, set[str]]:
    """Arms A and B, and the fingerprint fields they are expected to differ in."""
    forms = [
        request.aa,
        request.spec_b is not None,
        request.base_python is not None or request.candidate_python is not None,
        request.repo is not None or request.base is not None or request.candidate is not None,
    ]
    if sum(forms) != 1:
        raise AbOptionsError(
            "collobench ab: name two arms one way: SPEC SPEC_B, --aa, "
            "--base-python with --candidate-python, or --repo with --base and --candidate"
        )
    python = request.controller_python
    overrides = tuple(request.overrides)
    spec = request.spec.absolute()
    if request.aa:
        setup = ArmSetup("A", python, spec, overrides, description=f"{spec} (A/A)")
        return setup, ArmSetup("B", python, spec, overrides, description=setup.description), set()
    if request.spec_b is not None:
        spec_b = request.spec_b.absolute()
        return (
            ArmSetup("A", python, spec, overrides, description=str(spec)),
            ArmSetup("B", python, spec_b, overrides, description=str(spec_b)),
            {"spec_hash"},
        )
    if forms[3]:
        return _revision_setups(request, spec, overrides)
    if request.base_python is None or request.candidate_python is None:
        raise AbOptionsError("collobench ab: --base-python and --candidate-python go together")
    pythons = (request.base_python, request.candidate_python)
    for option, path in zip(("--base-python", "--candidate-python"), pythons, strict=True):
        if not path.exists():
            raise AbOptionsError(f"{option}: {path} does not exist")
    return (
        ArmSetup("A", str(pythons[0]), spec, overrides, description=str(pythons[0])),
        ArmSetup("B", str(pythons[1]), spec, overrides, description=str(pythons[1])),
        {
            "python_version",
            "torch_version",
            "transformers_version",
            "packages_sha256",
            "collobench_version",
            "cuda_version",
        },
    )


def _revision_setups(
    request: SessionRequest, spec: Path, overrides: tuple[str, ...]
) -> tuple[ArmSetup, ArmSetup, set[str]]:
    from stages.ab.revisions import REVISION_FINGERPRINTS, revision_arms

    if request.repo is None or request.base is None or request.candidate is None:
        raise AbOptionsError("collobench ab: --repo, --base and --candidate go together")
    setup_a, setup_b, request.repo_dirty = revision_arms(
        request.repo.absolute(),
        request.base,
        request.candidate,
        spec,
        overrides,
        request.ab_dir / "envs",
        request.allow_dirty,
    )
    return setup_a, setup_b, set(REVISION_FINGERPRINTS)


def _new_record(request: SessionRequest, setups: tuple[ArmSetup, ArmSetup]) -> SessionRecord:
    looks_blocks = parse_looks(request.looks)
    looks = plan_looks(looks_blocks, 0.05, request.boundary)  # type: ignore[arg-type]
    chooser = random.Random(request.seed)
    last = looks_blocks[-1]
    return SessionRecord(
        session_id=request.session_id,
        created_at=dt.datetime.now(dt.UTC).isoformat(),
        aa=request.aa,
        arms=[
            ArmRecord(
                label=s.label,
                python=s.python,
                spec=str(s.spec),
                overrides=list(s.overrides),
                description=s.description,
                revision=s.revision,
                extra_env=s.extra_env,
                cwd=s.cwd,
            )
            for s in setups
        ],
        seed=request.seed,
        margin_pct=request.margin_pct,
        budget_min=request.budget_min,
        boundary=request.boundary,
        looks_blocks=looks_blocks,
        look_alpha=list(looks.nominal_alpha),
        orders=balanced_orders(last, request.seed),
        block_seeds=[chooser.randrange(1, 2**31) for _ in range(last)],
        mode=request.mode,
        allow_dirty=request.allow_dirty,
        repo_dirty=request.repo_dirty,
        figures=(
            [f"{request.pipeline or '*'}/{request.metric or '*'}"]
            if request.pipeline or request.metric
            else []
        ),
    )


def _setups_of(record: SessionRecord) -> tuple[ArmSetup, ArmSetup]:
    a, b = (
        ArmSetup(
            r.label,
            r.python,
            Path(r.spec),
            tuple(r.overrides),
            dict(r.extra_env),
            r.description,
            r.revision,
            r.cwd,
        )
        for r in record.arms
    )
    return a, b


def run_session(request: SessionRequest, read_segment: ReadSegment, say: Say) -> CompletedSession:
    """Run (or resume) the session the request describes; see the module docstring."""
    files = SessionFiles(request.ab_dir / request.session_id)
    expected: set[str] = set()
    if request.resume:
        record = files.read()
        setups = _setups_of(record)
        record.status = "running"
    else:
        setup_a, setup_b, expected = arm_setups(request)
        setups = (setup_a, setup_b)
        record = _new_record(request, setups)
    arms: dict[str, ArmProcess] = {}
    duet = record.mode == "duet"
    try:
        for setup in setups:
            log = files.folder / f"arm-{setup.label}.log"
            # A duet's arms run at once on the cores they are given: each its own device locks.
            locks = files.folder / f"locks-{setup.label}" if duet else None
            arms[setup.label] = ArmProcess(setup, files.runs, log, locks)
        hellos = {label: arm.hello() for label, arm in arms.items()}
        pipelines = {label: hello["pipelines"] for label, hello in hellos.items()}
        if pipelines["A"] != pipelines["B"]:
            raise ArmsDifferError(
                f"{setups[1].spec}: arm B runs pipelines {pipelines['B']}, arm A "
                f"{pipelines['A']}: the arms must have the same pipelines"
            )
        record.spec_hash = str(hellos["A"]["spec_hash"])
        if duet and not request.resume:
            record.duet_cores = duet_cores(request, hellos)
        if not request.resume:
            files.create(record)
        runner = SessionRunner(files, record, arms, read_segment, SpreadStore(request.ab_dir), say)
        runner.pipelines = [str(name) for name in pipelines["A"]]
        say(f"session {record.session_id}: warming both arms up")
        runner.warm_up()
        for line in runner.fingerprint_differences(expected):
            say(line)
        for line in runner.plan(request.margin_pct, replan=not request.resume):
            say(line)
        outcome = runner.run_blocks()
    finally:
        for arm in arms.values():
            arm.close()
    phase = "solo" if len(pipelines["A"]) == 1 else "collocated"
    return CompletedSession(files, record, outcome.judgement, outcome.look_alpha, phase)
