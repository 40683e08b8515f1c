"""The `spawns` marker's guard (tests/spawn_guard.py), in an inner pytest session: in a check
session an unmarked test that starts a process fails with a message naming the marker, whether
the start is in the test's thread, another thread or a fixture; a marked one runs, and so does
ctypes' and platform's look-ups; outside a check session nothing is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.spawns  # the inner sessions are processes

INNER_TESTS = """
import ctypes.util
import multiprocessing
import platform
import subprocess
import sys
import threading

import pytest


@pytest.fixture
def child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_run():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_run_in_a_thread():
    thread = threading.Thread(target=subprocess.run, args=([sys.executable, "-c", "pass"],))
    thread.start()
    thread.join()


def test_thread_died_then_assert():
    done = []
    thread = threading.Thread(target=lambda: done.append(subprocess.run(["true"])))
    thread.start()
    thread.join()
    assert done


def test_find_library():
    assert ctypes.util.find_library("c")
    assert platform.uname().processor is not None  # `uname -p`


def test_process():
    process = multiprocessing.get_context("fork").Process(target=print)
    process.start()
    process.join()


def test_fixture(child):
    pass


def test_quiet():
    assert sum(range(4)) == 6


@pytest.mark.spawns
def test_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


def _inner(tmp_path: Path, *options: str, check: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("tests.spawn_guard",)\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    spawns: starts a process\n")
    environment = {k: v for k, v in os.environ.items() if k != "COLLOBENCH_CHECK"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    if check:
        environment["COLLOBENCH_CHECK"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *options, str(tmp_path)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _outcomes(stdout: str) -> dict[str, str]:
    """Test name -> PASSED / FAILED / ERROR from the `-rA` summary."""
    outcomes = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in {"PASSED", "FAILED", "ERROR"} and "::" in words[1]:
            outcomes[words[1].split("::")[-1]] = words[0]
    return outcomes


def test_a_check_session_fails_each_unmarked_start_and_names_the_marker(tmp_path: Path) -> None:
    child = _inner(tmp_path, check=True)
    assert _outcomes(child.stdout) == {
        "test_run": "FAILED",
        "test_run_in_a_thread": "FAILED",
        "test_thread_died_then_assert": "FAILED",
        "test_find_library": "PASSED",
        "test_process": "FAILED",
        "test_fixture": "ERROR",
        "test_quiet": "PASSED",
        "test_marked": "PASSED",
    }, child.stdout[-4000:]
    assert "test_inner.py::test_run started a process (subprocess.Popen(" in child.stdout
    assert "multiprocessing ForkProcess.start()" in child.stdout
    assert "test_thread_died_then_assert started a process (subprocess.Popen(['true']" in (
        child.stdout
    )
    assert "is not marked `spawns`: mark it `@pytest.mark.spawns`" in child.stdout


def test_not_spawns_in_the_mark_expression_makes_a_check_session(tmp_path: Path) -> None:
    child = _inner(tmp_path, "-m", "not  spawns", check=False)
    outcomes = _outcomes(child.stdout)
    assert "test_marked" not in outcomes, child.stdout[-4000:]
    assert outcomes["test_run"] == "FAILED" and outcomes["test_quiet"] == "PASSED"


def test_outside_a_check_session_nothing_is_refused(tmp_path: Path) -> None:
    child = _inner(tmp_path, check=False)
    assert child.returncode == 0, child.stdout[-4000:]
    assert set(_outcomes(child.stdout).values()) == {"PASSED"}
    assert len(_outcomes(child.stdout)) == 8
