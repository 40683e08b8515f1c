"""The controller's side of one arm: its process (`stages.cli.ab_arm` under the arm's Python),
one JSON request and one JSON answer per line, stopped by its process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stages.ab.arm_protocol import ARM_MODULE, ARM_PROTOCOL_VERSION
from stages.contracts.errors import InvalidInputError, RunFailedError

STOP_GRACE_S = 30.0  # an interrupted segment flushes its workers' rows before it answers


class ArmError(RunFailedError):
    """An arm's process died or answered out of protocol (its log says why)."""


class ArmEnvironmentError(InvalidInputError):
    """An arm's Python cannot run the arm: collobench is missing there, or speaks another
    version of the arm protocol."""


@dataclass(frozen=True)
class ArmSetup:
    """How to start one arm: which Python, which spec with which overrides, what environment."""

    label: str  # "A" or "B"
    python: str
    spec: Path
    overrides: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    description: str = ""  # what the user said this arm is (a spec, a venv, a revision)
    revision: str | None = None  # the commit a revision arm runs
    cwd: str | None = None  # where it runs (a revision arm: its worktree, for git_commit)


class ArmProcess:
    """A running arm."""

    def __init__(
        self, setup: ArmSetup, out_dir: Path, log_path: Path, lock_dir: Path | None = None
    ) -> None:
        """`lock_dir`: device locks of the arm's own (duet), else the machine's."""
        self.setup = setup
        self.log_path = log_path
        command = [setup.python, "-m", ARM_MODULE, str(setup.spec), "--out", str(out_dir)]
        if lock_dir is not None:
            command += ["--lock-dir", str(lock_dir)]
        for override in setup.overrides:
            command += ["--set", override]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
                start_new_session=True,  # Ctrl-C reaches the controller alone; it stops us
                env={**os.environ, **setup.extra_env},
                cwd=setup.cwd,
            )
        except OSError as error:
            self._log.close()
            raise ArmEnvironmentError(
                f"arm {setup.label}: cannot start {setup.python}: {error.strerror}"
            ) from None

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request, return its answer (`ok` true); ArmError if the arm died or
        answered `ok` false."""
        self.send(op, **fields)
        return self.answer()

    def send(self, op: str, **fields: Any) -> None:
        """Send one request without waiting (duet: both arms' segments start together)."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({"op": op, **fields}) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # answer() reports the arm's death

    def answer(self) -> dict[str, Any]:
        """The answer to the request sent last; ArmError if the arm died or answered not ok."""
        stdout = self.process.stdout
        assert stdout is not None
        try:
            line = stdout.readline()
        except OSError:
            line = ""
        if not line:
            code = self.process.wait(timeout=STOP_GRACE_S)
            raise ArmError(
                f"arm {self.setup.label}: its process exited with code {code} "
                f"({self._last_log_line()}); its log: {self.log_path}"
            )
        try:
            answer = json.loads(line)
        except ValueError:
            raise ArmError(f"arm {self.setup.label}: not an answer: {line[:200]!r}") from None
        if not answer.get("ok"):
            raise ArmError(f"arm {self.setup.label}: {answer.get('error')}")
        return dict(answer)

    def hello(self) -> dict[str, Any]:
        """The arm's Python, collobench and pipelines; ArmEnvironmentError when that Python
        has no collobench or one of another protocol."""
        try:
            answer = self.request("hello")
        except ArmError as error:
            if "No module named" in self._log_text():
                raise ArmEnvironmentError(
                    f"arm {self.setup.label}: {self.setup.python} has no collobench with A/B "
                    f"support ({self._last_log_line()})"
                ) from None
            raise ArmEnvironmentError(str(error)) from None
        if answer.get("protocol") != ARM_PROTOCOL_VERSION:
            raise ArmEnvironmentError(
                f"arm {self.setup.label}: {self.setup.python} runs a collobench of arm protocol "
                f"{answer.get('protocol')}, this one speaks {ARM_PROTOCOL_VERSION}"
            )
        return answer

    def interrupt(self) -> None:
        """SIGTERM to the arm's process group: a running segment stops and keeps its rows."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)

    def close(self) -> None:
        """Ask the arm to stop; its process group is killed if it has not within the grace."""
        stdin = self.process.stdin
        with contextlib.suppress(OSError, ValueError):
            if stdin is not None:
                stdin.write(json.dumps({"op": "stop"}) + "\n")
                stdin.close()
        try:
            self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_GRACE_S)
        # Anything left in its group (a worker that outlived it) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()

    def _log_text(self) -> str:
        self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _last_log_line(self) -> str:
        lines = [line for line in self._log_text().splitlines() if line.strip()]
        return lines[-1].strip()[:300] if lines else "no output"
