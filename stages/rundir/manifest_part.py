"""The base of every part of the manifest (stages.rundir.manifest and its `startup` part)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ManifestPart(BaseModel):
    """A part of the manifest only collobench writes: unknown keys are an error, and the
    serialization schema lists every field as always present."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)
