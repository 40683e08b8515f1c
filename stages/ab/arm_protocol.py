"""What the A/B controller and an arm's process (`stages.cli.ab_arm`) agree on: the protocol's
version and the overrides that make one short run of a spec a segment."""

from __future__ import annotations

ARM_PROTOCOL_VERSION = 1
"""Raised when a request or an answer changes shape: a controller refuses an arm that speaks
another version (a revision of collobench from before or after the change)."""
ARM_MODULE = "stages.cli.ab_arm"


def segment_overrides(seed: int) -> list[str]:
    """The `--set` overrides of a segment with the block's `seed`: one trial of the spec's
    single (or collocated) phase, no solo baselines, no idle baseline. Recorded in each
    segment's manifest, so a segment's run reads as what it was."""
    return [
        f"seed={seed}",
        "repeats=1",
        "collocation.solo_baselines=false",
        "telemetry.idle_baseline_s=0",
    ]
