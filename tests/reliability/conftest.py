"""The reliability suite: fault injection, hostile input, durability and (marker `soak`) the soak.
Each test counts what it injected and survived in `tests.reliability.figures`."""

from __future__ import annotations

import pytest

from tests.reliability import figures


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    figures.write_if_requested()
