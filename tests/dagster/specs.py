"""Tiny spec documents for the Dagster tests and a writer that puts them in a specs folder
(plain module: test modules import it, not the conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def tiny_spec(name: str = "tiny", **extra: Any) -> dict[str, Any]:
    """One sleep stage at 100 q/s for 1 s, no warm-up, solo only: a run takes a few seconds.
    Host samples every 200 ms, so a loaded CI machine does not open a 3-period gap."""
    return {
        "name": name,
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": [
            {
                "name": "p",
                "loadgen": {
                    "type": "server",
                    "rate": 100,
                    "duration_s": 1,
                    "warmup_queries": 0,
                    "timeout_s": 30,
                },
                "stages": [{"id": "s", "type": "sleep", "config": {"ms": 1}}],
            }
        ],
        **extra,
    }


def write_spec(folder: Path, stem: str, document: dict[str, Any] | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.yaml"
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def prompts_spec(name: str = "tiny") -> dict[str, Any]:
    """The tiny spec with a `dataset.prompts` stage in front: it uses the `prompts` artefact
    (the cheapest builder, well under a second), so the demo has an artefact to materialise."""
    spec = tiny_spec(name)
    spec["pipelines"][0]["stages"] = [
        {"id": "d", "type": "dataset.prompts", "outputs": ["s"]},
        {"id": "s", "type": "sleep", "config": {"ms": 1}},
    ]
    return spec
