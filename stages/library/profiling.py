"""Operator profiling on sampled queries: torch.profiler around every Nth query of a stage.

STUB: the interface model stages call. `around(query)` is a no-op until the profiling work
lands (operator spans into `operator_spans.parquet`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from stages.runtime.query import Query
from stages.runtime.stage import StageContext


class OperatorProfiler:
    """Profiles every `every`-th query a stage runs (0 = never)."""

    def __init__(self, every: int, context: StageContext) -> None:
        self.every = every
        self.context = context

    def around(self, query: Query) -> AbstractContextManager[None]:
        """Wrap one query's model call: profiled when it is a sampled one, else free."""
        return nullcontext()
