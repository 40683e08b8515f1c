"""The Pipes child of the `ab_report` asset: runs `collobench ab ... --format json` and hands the
verdicts back.

    python -m bench_defs.ab.runner -- COMMAND...

Started by `GroupPipesClient` in its own session, so the session's two resident arm workers and
their segments' processes are one process group that cancelling the Dagster run ends together.
The CLI's stderr (the plan, each block, each look) is relayed line by line to the event log and
stdout (the compute logs); its stdout, one JSON array of one object per figure, is parsed and
sent to the asset as one Pipes custom message `{"rows": [...], "session_dir": PATH}` (the
session's folder as this process's settings place it, the CLI's own environment). SIGTERM and
SIGINT are not fatal here: the CLI got them too, prints the verdict of its finished blocks and
exits 130. Exit status: the CLI's, or 1 when its stdout was not the JSON array.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from dagster_pipes import PipesContext, open_dagster_pipes

from stages import settings
from stages.contracts.errors import ExitCode


def _relay_stderr(stream: Any, pipes: PipesContext) -> None:
    """Each stderr line of the CLI to the event log and to stdout, as it comes."""
    for line in iter(stream.readline, ""):
        text = line.rstrip("\n")
        if text:
            pipes.log.info(text)
            print(text, flush=True)


def session_answer(stdout: str) -> dict[str, Any]:
    """The CLI's JSON array as the asset's message; ValueError when stdout is not one."""
    rows = json.loads(stdout)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError("collobench ab --format json printed no array of objects")
    session_id = rows[0].get("session_id") if rows else None
    folder = settings.ab_dir() / str(session_id) if session_id else None
    return {"rows": rows, "session_dir": str(folder) if folder else None}


def run_session(command: Sequence[str], pipes: PipesContext) -> int:
    """Run the CLI, relay its stderr, report its answer; its exit code (1 for no answer)."""
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    relay = threading.Thread(target=_relay_stderr, args=(process.stderr, pipes), daemon=True)
    relay.start()
    assert process.stdout is not None
    stdout = process.stdout.read()
    exit_code = process.wait()
    relay.join(timeout=5)
    try:
        answer = session_answer(stdout)
    except ValueError as error:
        pipes.log.error(f"collobench ab exited with {exit_code}: {error}: {stdout[-500:]!r}")
        return exit_code or 1
    pipes.report_custom_message(answer)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m bench_defs.ab.runner -- COMMAND...", file=sys.stderr)
        return ExitCode.INVALID_INPUT
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _note_signal)
    with open_dagster_pipes() as pipes:
        pipes.log.info("running " + " ".join(command))
        exit_code = run_session(command, pipes)
        if exit_code != 0:
            pipes.log.error(f"collobench ab exited with {exit_code}")
        return exit_code


def _note_signal(signum: int, frame: object) -> None:
    """Keep running: the CLI got the same signal, prints its verdict so far and exits."""


if __name__ == "__main__":
    sys.exit(main())
