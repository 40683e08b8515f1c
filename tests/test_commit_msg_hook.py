"""The shipped commit-msg hook (.githooks/commit-msg) and its installation by make."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / ".githooks" / "commit-msg"


def _hook() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("commit_msg_hook", str(HOOK))
    spec = importlib.util.spec_from_loader("commit_msg_hook", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_subject_of_72_characters_passes_and_73_is_refused() -> None:
    hook = _hook()
    assert hook.problems("x" * 72 + "\n\nbody of any length " * 20) == []
    (problem,) = hook.problems("x" * 73 + "\n")
    assert "73 characters (at most 72)" in problem


def test_a_body_that_starts_on_the_second_line_is_refused() -> None:
    hook = _hook()
    assert hook.problems("Subject\nbody at once") == [
        "the second line must be blank: the subject is one line, the body follows"
    ]
    assert hook.problems("# a comment git strips\nSubject\n\nBody\n# another\n") == []


def test_the_hook_refuses_through_its_command_line(tmp_path: Path) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("y" * 100 + "\n")
    assert _hook().main(["commit-msg", str(message)]) == 1
    message.write_text("Short subject\n\nThe detail.\n")
    assert _hook().main(["commit-msg", str(message)]) == 0


def test_make_install_points_git_at_the_hooks_and_the_hook_is_executable() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    install = re.search(r"^install:.*?(?=^\S)", makefile, re.S | re.M)
    assert install is not None and "git config core.hooksPath .githooks" in install.group(0)
    assert HOOK.stat().st_mode & 0o111
