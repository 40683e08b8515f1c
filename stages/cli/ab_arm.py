"""One arm of an A/B session (`collobench ab`): a process, under the arm's own Python, that
runs the arm's spec as one short ordinary run per segment, its workers resident between them.

    python -m stages.cli.ab_arm SPEC --out DIR [--set PATH=VALUE ...]

It reads one JSON request per line on stdin and answers each with one JSON line on the
stdout it was started with (fd 1 is pointed at stderr at once, so nothing a stage prints can
corrupt an answer). Requests (`stages.ab.arm_protocol`): `hello` (its Python and collobench),
`segment` (a run with the given run id, seed and any further overrides: a duet block's cores),
`stop`. A segment's run is the spec's single
phase (one pipeline) or its collocated phase, once: `repeats`, solo baselines and the idle
baseline are set aside by overrides, which the run's manifest records. An error answers
`{"ok": false, "error": ...}`; the process exits on `stop` or at the end of stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from stages.ab.arm_protocol import ARM_PROTOCOL_VERSION, segment_overrides

ENVIRONMENT_REUSED = "environment"


def _private_answer_channel() -> IO[str]:
    """A copy of the original stdout for answers; fd 1 then goes to stderr."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


class ArmHost:
    """Runs segments of one spec with resident workers."""

    def __init__(
        self, spec: Path, out_dir: Path, overrides: list[str], lock_dir: Path | None
    ) -> None:
        from stages.collocation.resident_workers import ResidentWorkers

        self.spec = spec
        self.out_dir = out_dir
        self.overrides = overrides
        self.lock_dir = lock_dir
        """Device locks of its own (duet: both arms run at once on the cores they were given;
        None: the machine's, like any run)."""
        self.resident = ResidentWorkers()
        self._environment: dict[str, object] | None = None

    def hello(self) -> dict[str, Any]:
        import stages
        from stages.validation.loading import load_spec

        loaded = load_spec(self.spec, [*self.overrides, *segment_overrides(0)])
        return {
            "protocol": ARM_PROTOCOL_VERSION,
            "python": sys.executable,
            "collobench_path": str(Path(stages.__file__).resolve().parent.parent),
            "pipelines": [pipeline.name for pipeline in loaded.spec.pipelines],
            "devices": sorted({pipeline.device for pipeline in loaded.spec.pipelines}),
            "pinned": [p.name for p in loaded.spec.pipelines if p.placement.cpus is not None],
            "spec_hash": loaded.spec_hash,
        }

    def segment(self, run_id: str, seed: int, extra: list[str]) -> dict[str, Any]:
        from stages import settings
        from stages.cli.wiring import summarize_phase
        from stages.collocation.launcher import RunOptions, run_benchmark
        from stages.collocation.results import LauncherInterruptedWithResult
        from stages.rundir.manifest import read_manifest_document
        from stages.validation.loading import load_spec

        loaded = load_spec(self.spec, [*self.overrides, *segment_overrides(seed), *extra])
        options = RunOptions(
            out_dir=self.out_dir,
            cache_dir=settings.cache_dir(),
            run_id=run_id,
            summarize_phase=summarize_phase,
            environment=self._environment,
            resident_workers=self.resident,
        )
        if self.lock_dir is not None:
            options.lock_dir = self.lock_dir
        started = time.monotonic()
        try:
            result = run_benchmark(loaded, options)
        except LauncherInterruptedWithResult as interrupted:
            result = interrupted.result
        wall_s = time.monotonic() - started
        if self._environment is None:  # probed once: later segments record it as is
            manifest = read_manifest_document(result.run_dir)
            self._environment = manifest.get(ENVIRONMENT_REUSED) or None
        errors = [f"{o.pipeline}: {o.status}: {o.error}" for o in result.failed]
        return {
            "run_id": result.run_id,
            "run_dir": str(result.run_dir),
            "status": result.status,
            "error": "; ".join(errors) or None,
            "wall_s": wall_s,
            "workers_reused": self.resident.reused,
        }

    def close(self) -> None:
        self.resident.close()


def _serve(host: ArmHost, answers: IO[str]) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "stop":
                return
            if op == "hello":
                answer = host.hello()
            elif op == "segment":
                extra = [str(item) for item in request.get("overrides", [])]
                answer = host.segment(str(request["run_id"]), int(request["seed"]), extra)
            else:
                raise ValueError(f"unknown request {op!r}")
            answer = {"ok": True, **answer}
        except Exception as error:  # answered, never a dead arm: the session decides
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(answer) + "\n")


def main(argv: list[str] | None = None) -> None:
    answers = _private_answer_channel()
    parser = argparse.ArgumentParser(prog="python -m stages.cli.ab_arm")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--lock-dir", type=Path, default=None)
    arguments = parser.parse_args(argv)
    from stages.rundir.arrow_pandas import skip_pandas_check

    skip_pandas_check()
    host = ArmHost(arguments.spec, arguments.out, arguments.overrides, arguments.lock_dir)
    try:
        _serve(host, answers)
    finally:
        host.close()


if __name__ == "__main__":
    main()
