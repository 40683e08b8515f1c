"""One GPU check's outcome, shared by the checks of `make gpu-check` (tests/gpu/gpu_check.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OK, FAIL, SKIP = "ok", "FAIL", "skip"


@dataclass
class Check:
    """One check's outcome: status ok | FAIL | skip, a human-readable detail, its figures."""

    name: str
    status: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}"


def skip_all(names: list[str], reason: str) -> list[Check]:
    return [Check(name, SKIP, reason) for name in names]


def guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check that raised is a FAIL with the error, never a traceback that hides the rest."""
    try:
        return check()
    except Exception as error:
        return Check(name, FAIL, f"raised {type(error).__name__}: {error}")
