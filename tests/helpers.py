"""Test helpers: test-only stage types and small builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stages.runtime.query import Query
from stages.runtime.registry import default_registry, stage_type
from stages.runtime.stage import Route, Stage

default_registry()

REPO = Path(__file__).resolve().parents[1]


@stage_type("test.tag")
class TagStage(Stage):
    """Test stage: payload becomes (stage id, query id, upstream payload), so a join that
    mixed two queries would be visible in the merged payload."""

    def run(self, query: Query) -> Route:
        query.payload = (self.context.stage_id, query.query_id, query.payload)
        return None


def pipeline_doc(stages: list[dict[str, Any]], **loadgen: Any) -> dict[str, Any]:
    return {"name": "p", "loadgen": loadgen, "stages": stages}
