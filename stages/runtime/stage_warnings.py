"""What a pipeline's stages warn about while they run (a check a visit could not make, say),
counted per (stage, message) across every stage thread, for the run's warnings: the worker
sends them with its `Done`, the launcher records each as a `stage_warning`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

WarningSink = Callable[[str], None]
"""Where a stage sends a warning about one of its visits: `warn(message)`, one line."""


def drop_warning(message: str) -> None:
    """The sink of a context built outside a pipeline runtime: warnings go nowhere."""


class StageWarnings:
    """Each distinct warning of each stage once, with the number of visits that raised it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._visits: dict[tuple[str, str], int] = {}

    def sink(self, stage_id: str) -> WarningSink:
        """The `warn` of a stage's context: counts its message under its stage id."""

        def warn(message: str) -> None:
            key = (stage_id, message)
            with self._lock:
                self._visits[key] = self._visits.get(key, 0) + 1

        return warn

    def records(self) -> list[dict[str, Any]]:
        """`{stage, message, visits}` per distinct warning, in the order first raised."""
        with self._lock:
            counted = list(self._visits.items())
        return [
            {"stage": stage, "message": message, "visits": visits}
            for (stage, message), visits in counted
        ]
