"""The Pipes child of the `capacity` asset: runs `collobench capacity ...` and relays its progress.

    python -m bench_defs.capacity.runner -- COMMAND...

Started by `GroupPipesClient` in its own session, so the search, its probes' workers and their
samplers are one process group that cancelling the Dagster run ends together. The CLI reports
its progress as typed records (`$COLLOBENCH_PROGRESS=jsonl`: the search's start, one per probe),
relayed to the event log and stdout (the compute logs) by `pipes_runner.relay`; it prints no
tables then. The asset reads `capacity.json` itself once this exits. SIGTERM/SIGINT are not
fatal here: the CLI got them too, keeps the probes it recorded and exits (a re-executed run
resumes them). Exit status: the CLI's.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from dagster_pipes import open_dagster_pipes

from bench_defs.core.pipes_runner import run_relayed
from stages.contracts.errors import ExitCode


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m bench_defs.capacity.runner -- COMMAND...", file=sys.stderr)
        return ExitCode.INVALID_INPUT
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _note_signal)
    with open_dagster_pipes() as pipes:
        pipes.log.info("running " + " ".join(command))
        exit_code = run_relayed(command, pipes)
        if exit_code != 0:
            pipes.log.error(f"collobench capacity exited with {exit_code}")
        return exit_code


def _note_signal(signum: int, frame: object) -> None:
    """Keep running: the CLI got the same signal, records what it has and exits."""


if __name__ == "__main__":
    sys.exit(main())
