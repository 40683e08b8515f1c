"""The `Stage` extension point: a typed config model and a small lifecycle.

A stage type is a subclass of `Stage` registered under a name (`stages.runtime.registry`).
The runtime calls `prepare()` once before the start barrier (load models and data there),
`run(query)` once per query visit in the stage's own thread, and `close()` at shutdown.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from stages import settings
from stages.runtime.query import Query
from stages.spec.models import StrictModel

RowSink = Callable[[str, list[dict[str, Any]]], None]
"""Where a stage sends rows of an extra run-directory table: `sink(table, rows)`; each row is a
dict of that table's columns without the key columns (run_id, trial, phase, pipeline), which
the recorder adds."""


def _drop_rows(table: str, rows: list[dict[str, Any]]) -> None:
    """The sink of a context built outside a pipeline runtime: rows go nowhere."""


Route = Sequence[str] | None
"""What `run` returns: None sends the query to every output (or ends it at a pipeline output);
a sequence names the outputs to take (a subset, an earlier stage for a loop, or none)."""


class StageConfig(StrictModel):
    """Base of stage config models; a stage type without options uses it as is."""

    file_fields: ClassVar[tuple[str, ...]] = ()
    """Fields that name a file: a spec's value is resolved against the spec's folder and must
    lie inside the allowed roots (stages.spec.paths)."""


@dataclass
class StageContext:
    """What a stage knows about where it runs, besides its config."""

    stage_id: str
    stage_index: int = 0
    """Position in the pipeline graph; `query.visits[stage_index]` is this stage's visit count."""
    pipeline: str = "pipeline"
    device: str = "cpu"
    seed: int = 0
    outputs: tuple[str, ...] = ()
    cache_dir: Path = field(default_factory=settings.cache_dir)  # under $COLLOBENCH_HOME
    stop_event: threading.Event = field(default_factory=threading.Event)
    """Set at shutdown; a stage that waits (sleep, hang) waits on this so it can be released."""
    write_rows: RowSink = _drop_rows
    """Sink for rows of an extra table (e.g. `operator_spans`); the pipeline runtime wires it to
    its recorder (chunk files under `parts/<table>/`). A context built by hand drops the rows."""


class Stage(ABC):
    """Base class of every stage type. Subclasses set `config_model` and implement `run`."""

    config_model: ClassVar[type[StageConfig]] = StageConfig
    records_outcome: ClassVar[bool] = False
    """Stages that report what a query produced set this and fill, in `run`, any of
    `query.first_token_ns` / `query.tokens` (generation), `query.graded` / `query.correct`
    (samples graded and samples right, by a stage that knows the answers: accuracy beside
    performance) and `query.loss` (training). Off, the hot path skips them."""

    def __init__(self, config: StageConfig, context: StageContext) -> None:
        self.config = config
        self.context = context

    @classmethod
    def check_outputs(cls, config: StageConfig, outputs: Sequence[str]) -> list[str]:
        """Problems with this stage's outgoing edges given its config (e.g. a loop target)."""
        return []

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Load models and data. Runs before the start barrier, so it is never timed."""

    @abstractmethod
    def run(self, query: Query) -> Route:
        """Process one query visit; set `query.payload` to pass a result downstream."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Called once after the stage's thread has stopped."""
