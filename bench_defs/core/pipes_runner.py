"""The Pipes child of `benchmark_run`: runs `collobench run` and reports its figures to Dagster.

    python -m bench_defs.core.pipes_runner --spec SPEC --out DIR --run-id ID [--set path=value]...

Started by `GroupPipesClient` in its own session (process group leader). It runs the CLI as its
child in the same group, so the benchmark's workers and samplers are all in one group that the
orchestrator can end together. The CLI runs with `$COLLOBENCH_PROGRESS=jsonl`: its stdout carries
typed progress records (stages.contracts.progress: phase starts, each pipeline's phase end,
warnings with their codes), which go to Dagster's event log through `PipesContext.log` and, as
their one-line messages, to stdout; its stderr lines (one-line errors) are relayed as they are.
Once the CLI exits, the run's manifest is read and reported as the materialisation's metadata:
per pipeline and phase throughput, p50 and p99 with their 95% intervals, the energy source, run
directory, spec hash, run id and the overrides. Only dagster-pipes and the leaf contracts
(stages.rundir, stages.contracts) are imported here: torch stays in the CLI's workers.

SIGTERM or SIGINT reaching this process (the whole group gets it on cancellation) is not fatal
here: the CLI stops its workers, writes its manifest (status interrupted) and exits, and what
was kept is still reported. Exit status (stages.contracts.errors.ExitCode): 0 when a manifest
was reported and the run was not interrupted, else the CLI's (2 invalid input, 3 device busy:
the pre-flight found a foreign compute process on the run's device, nothing measured and no
materialisation, 130 interrupted).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster_pipes import PipesContext, open_dagster_pipes

from stages.contracts.errors import ExitCode
from stages.contracts.progress import JSONL, PROGRESS_ENV, ProgressRecord
from stages.contracts.warnings import WarningCode
from stages.rundir.layout import MANIFEST
from stages.rundir.manifest import DEVICE_BUSY, Manifest, PipelineResult, read_manifest


def cli_command(spec: str, out: str, run_id: str, overrides: Sequence[str]) -> list[str]:
    """The `collobench run` command line this runner starts."""
    # The `warehouse` asset loads the run and writes its report and trace: the child only runs.
    command = [sys.executable, "-m", "stages.cli", "run", spec, "--out", out, "--run-id", run_id]
    command.append("--no-load")
    for override in overrides:
        command += ["--set", override]
    return command


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def _with_interval(figures: Mapping[str, float], name: str, low: str, high: str) -> str:
    text = _number(figures.get(name))
    if figures.get(low) is not None and figures.get(high) is not None:
        text += f" [{_number(figures[low])}, {_number(figures[high])}]"
    return text


def summary_markdown(results: Sequence[PipelineResult | Mapping[str, Any]]) -> str:
    """Per trial, phase and pipeline: status, ok queries, q/s, p50 and p99 (ms) with their 95%
    intervals and the SLO verdict (met, missed, undecided; - without an SLO), as the launcher's
    phase summaries (the analysis views) computed them."""
    lines = [
        "| trial | phase | pipeline | status | ok | q/s | p50 ms | p99 ms | SLO |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for outcome in (PipelineResult.model_validate(result) for result in results):
        figures = outcome.summary or {}
        lines.append(
            f"| {outcome.trial} | {outcome.phase} | {outcome.pipeline} "
            f"| {outcome.status} | {_number(figures.get('queries_ok', outcome.ok))} "
            f"| {_with_interval(figures, 'queries_per_s', 'queries_per_s_ci_low', 'queries_per_s_ci_high')} "  # noqa: E501
            f"| {_with_interval(figures, 'latency_p50_ms', 'latency_p50_ci_low_ms', 'latency_p50_ci_high_ms')} "  # noqa: E501
            f"| {_with_interval(figures, 'latency_p99_ms', 'latency_p99_ci_low_ms', 'latency_p99_ci_high_ms')} "  # noqa: E501
            f"| {outcome.slo_verdict or '-'} |"
        )
    return "\n".join(lines)


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def manifest_metadata(
    manifest: Manifest | Mapping[str, Any], run_dir: Path, exit_code: int
) -> dict[str, Any]:
    """The materialisation metadata of a run, in Pipes' typed form."""
    manifest = Manifest.model_validate(manifest)
    energy = manifest.energy
    sources = [value for value in (energy.gpu_source, energy.host_source) if value]
    devices = sorted({p.device for p in manifest.spec.pipelines})
    metadata: dict[str, Any] = {
        "run_id": {"raw_value": manifest.run_id, "type": "text"},
        "run_dir": {"raw_value": str(run_dir), "type": "path"},
        "status": {"raw_value": manifest.status or "unknown", "type": "text"},
        "exit_code": {"raw_value": exit_code, "type": "int"},
        "spec_hash": {"raw_value": manifest.spec_hash or "", "type": "text"},
        "spec_source": {"raw_value": manifest.spec_source or "", "type": "path"},
        "seed": {"raw_value": manifest.seed, "type": "int"},
        "seeds": {
            "raw_value": {name: seeds.model_dump() for name, seeds in manifest.seeds.items()},
            "type": "json",
        },
        "overrides": {"raw_value": manifest.overrides, "type": "json"},
        "devices": {"raw_value": ", ".join(devices), "type": "text"},
        "energy_source": {"raw_value": ",".join(sources) or "none", "type": "text"},
        "warnings": {
            "raw_value": "\n".join(f"- {w}" for w in manifest.warnings) or "none",
            "type": "md",
        },
        "summary": {"raw_value": summary_markdown(manifest.results), "type": "md"},
    }
    metadata.update(_headline_metadata(manifest.results))
    return metadata


def _headline_metadata(results: list[PipelineResult]) -> dict[str, Any]:
    """Headline floats per pipeline (the UI plots them across materialisations): the last
    phase each pipeline ran in (collocated when there is one) of the last trial."""
    headline: dict[str, dict[str, float]] = {}
    for outcome in results:
        headline[outcome.pipeline] = outcome.summary or {}
    metadata: dict[str, Any] = {}
    for pipeline, figures in headline.items():
        for key, name in (
            ("queries_per_s", "queries_per_s"),
            ("p50_ms", "latency_p50_ms"),
            ("p99_ms", "latency_p99_ms"),
        ):
            value = _finite(figures.get(name))
            if value is not None:
                metadata[f"{pipeline}/{key}"] = {"raw_value": value, "type": "float"}
    return metadata


def relay(process: subprocess.Popen[str], pipes: PipesContext) -> None:
    """Each progress record of the CLI to the event log at its level, an error line (stderr)
    as it is; both, as one line, to stdout. Once stdout is gone (the Pipes client's process
    died: a crashed Celery worker) the output is still read to the end, so the CLI winds down
    and writes its manifest."""
    assert process.stdout is not None
    echo = True
    for line in process.stdout:
        record = ProgressRecord.from_line(line)
        text = record.message if record else line.rstrip()
        if echo:
            try:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
            except OSError:  # BrokenPipeError: nobody reads our stdout any more
                echo = False
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (to the end of the process)
        if record is not None and record.level == "warning":
            pipes.log.warning(text)
        elif text.strip():
            pipes.log.info(text)


def run_relayed(command: Sequence[str], pipes: PipesContext) -> int:
    """Run the CLI with its progress as records (`$COLLOBENCH_PROGRESS=jsonl`) and its output
    relayed (see `relay`); its exit code."""
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, PROGRESS_ENV: JSONL},
    )
    relay(process, pipes)
    return process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="Spec YAML file.")
    parser.add_argument("--out", required=True, help="Parent folder of the run directory.")
    parser.add_argument("--run-id", required=True, help="Run directory name.")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    # The group gets SIGTERM on cancellation: let the CLI wind down and report what it kept.
    # A handler that does nothing (not SIG_IGN, which the CLI would inherit through exec).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _note_signal)
    with open_dagster_pipes() as pipes:
        command = cli_command(args.spec, args.out, args.run_id, args.overrides)
        pipes.log.info("running " + " ".join(command[1:]))
        exit_code = run_relayed(command, pipes)
        run_dir = Path(args.out) / args.run_id
        if not (run_dir / MANIFEST).is_file():
            pipes.log.error(f"collobench run exited with {exit_code} and wrote no manifest")
            return exit_code or 1
        manifest = read_manifest(run_dir)
        if manifest.status == DEVICE_BUSY:  # refused before measuring: nothing to report
            for warning in manifest.warning_records:
                if warning.code == WarningCode.FOREIGN_COMPUTE_PROCESS:
                    pipes.log.error(f"{DEVICE_BUSY}: {warning.message}")
            return ExitCode.DEVICE_BUSY
        pipes.report_asset_materialization(
            metadata=manifest_metadata(manifest, run_dir, exit_code),
            data_version=manifest.run_id,
        )
        if manifest.status == "interrupted":
            return ExitCode.INTERRUPTED
        return ExitCode.OK


def _note_signal(signum: int, frame: object) -> None:
    """Keep running: the CLI got the same signal and is stopping; its manifest follows."""


if __name__ == "__main__":
    sys.exit(main())
