"""Where the repository is, computed once for every test folder (no `Path(__file__).parents[n]`
that breaks when a test module moves)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
