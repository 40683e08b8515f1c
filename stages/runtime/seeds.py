"""Deterministic seeds derived from the spec seed, so reruns issue identical schedules."""

from __future__ import annotations

import hashlib


def derive_seed(base_seed: int, *labels: object) -> int:
    """A 63-bit seed from the spec seed and labels (pipeline name, trial, purpose)."""
    text = "/".join([str(base_seed), *(str(label) for label in labels)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
