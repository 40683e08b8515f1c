"""Helpers of the tests that start processes of their own: `dagster dev` on a free loopback
port (from Python, in a new session, ended by process group: started from a shell in the
background it ignores SIGINT and SIGTERM), and the process-group ending itself."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench_defs.resources import end_process_group
from tests.helpers import REPO

START_TIMEOUT_S = 180.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def dagster_dev(
    dagster_home: Path, env: Mapping[str, str], log_path: Path
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`dagster dev -w workspace.yaml` on 127.0.0.1 and a free port, with `dagster_home` as
    DAGSTER_HOME and `env` on top of this process's environment; yields (port, process) once
    /server_info answers, and ends the whole process group on exit."""
    port = free_port()
    full_env = {
        **os.environ,
        **env,
        "DAGSTER_HOME": str(dagster_home),
        "PYTHONPATH": str(REPO),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *(str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"),
                *("-h", "127.0.0.1", "-p", str(port)),
            ],
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                assert process.poll() is None, log_path.read_text()[-3000:]
                with contextlib.suppress(OSError):
                    url = f"http://127.0.0.1:{port}/server_info"
                    with urllib.request.urlopen(url, timeout=5) as response:
                        if response.status == 200:
                            break
                assert time.monotonic() < deadline, (
                    f"dagster dev did not answer in {START_TIMEOUT_S:g} s"
                )
                time.sleep(1)
            yield port, process
        finally:
            end_process_group(process, grace_s=30.0)
