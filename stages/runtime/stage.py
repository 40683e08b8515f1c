"""The `Stage` extension point: a typed config model and a small lifecycle.

A stage type is a subclass of `Stage` registered under a name (`stages.runtime.registry`),
generic over its config: `class SleepStage(Stage[SleepConfig])` types `self.config` as a
`SleepConfig` and makes `SleepConfig` the model a spec's `config` block is validated with.
The runtime calls `prepare()` once before the start barrier (load models and data there),
`run(query)` once per query visit in the stage's own thread, and `close()` at shutdown.
An asynchronous stage type subclasses `AsyncStage` (`stages.runtime.async_stage`) instead.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast, get_args

from stages import settings
from stages.contracts.image_batches import ImageBatch
from stages.runtime.query import Query
from stages.runtime.stage_warnings import WarningSink, drop_warning
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
    lie inside the allowed roots (stages.validation.paths)."""
    model_entry_fields: ClassVar[tuple[str, ...]] = ()
    """Fields that take a model entry (`stages.spec.model_entry`) besides a model name: its
    folder or file is resolved, kept inside the model roots and hashed by content."""

    def images_out(self, images_in: ImageBatch | None) -> ImageBatch | None:
        """The image batches this stage passes on, given those it gets (None: none, or not
        known). Only the stages that make or reshape images say; the rest break the chain."""
        return None

    def request_problems(self, shapes: Sequence[Mapping[str, Any] | None]) -> list[str]:
        """For an entry stage fed by a trace: `row N: message` for each request shape (a
        trace row's input_tokens, output_tokens, hash_ids; None: none) it cannot serve,
        found before the run. Only stages that build requests from shapes say."""
        return []

    def images_problems(self, images_in: ImageBatch) -> list[tuple[str, str]]:
        """(config field, message) for each way this stage cannot take `images_in` (a model
        whose input or output does not fit), found before the run."""
        return []

    def prompt_api(self) -> str | None:
        """The API a stage that sends prompts to a server sends them over (`chat`,
        `completions`: what the server's `usage.prompt_tokens` counts); None: it sends none.
        A prompt builder upstream counts its tokens for this API
        (stages.validation.prompt_counting)."""
        return None

    def follow_prompt_apis(
        self, senders: Mapping[str, str]
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """For a stage that builds token-exact prompts, given the stages downstream that send
        them (stage id -> `prompt_api`): (config fields to set, (config field, message) for
        each contradiction), found before the run. Other stages: nothing."""
        return {}, []


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
    service_urls: Mapping[str, str] = field(default_factory=dict)
    """The spec's services that are up: name -> base URL (`http://127.0.0.1:PORT`, no trailing
    slash); a stage whose config names a `service` finds its server here."""
    images_in: ImageBatch | None = None
    """The image batches the stage before this one passes on, when the pipeline's stages say
    (`StageConfig.images_out`): a model stage checks its model against them in `prepare`."""
    replica: int = 0
    """Which of the stage's `concurrency` threads this instance serves (0 for the first; the
    seed of replica r > 0 is offset by r * REPLICA_SEED_STRIDE)."""
    warn: WarningSink = drop_warning
    """Records a warning about a visit (one line: a check it could not make) for the run's
    warnings, counted per distinct message; a context built by hand drops it."""


ConfigT = TypeVar("ConfigT", bound=StageConfig)


def _config_model_named(cls: type) -> type[StageConfig] | None:
    """The concrete config model a class's generic bases name (`Stage[X]`, `_Base[X]`), if any."""
    for base in getattr(cls, "__orig_bases__", ()):
        for argument in get_args(base):
            if isinstance(argument, type) and issubclass(argument, StageConfig):
                return argument
    return None


class _ConfigModel:
    """`Stage.config_model`: the model a spec's `config` block is validated with, typed as the
    stage class's config parameter (`SleepStage.config_model` is `type[SleepConfig]`)."""

    def __get__(self, instance: object, owner: type[Stage[ConfigT]]) -> type[ConfigT]:
        # Set by __init_subclass__ from the same parameter, so the cast is what mypy cannot see.
        return cast("type[ConfigT]", owner._config_model)


class Stage(ABC, Generic[ConfigT]):
    """Base class of every stage type: `class X(Stage[XConfig])`, implementing `run`. A stage
    without options subclasses `Stage[StageConfig]` (plain `Stage` means the same at run time)."""

    config_model = _ConfigModel()
    _config_model: ClassVar[type[StageConfig]] = StageConfig
    """Set from the type parameter, or from a `config_model = X` a class sets by hand (the
    older spelling, still accepted from third-party stages)."""
    records_outcome: ClassVar[bool] = False
    """Stages that report what a query produced set this and fill, in `run`, any of
    `query.first_token_ns` / `query.tokens` (generation), `query.graded` / `query.correct`
    (samples graded and samples right, by a stage that knows the answers: accuracy beside
    performance) and `query.loss` (training). Off, the hot path skips them."""
    thread_safe: ClassVar[bool] = False
    """With `concurrency: N`, every thread gets its own instance (its own `prepare`, models and
    state) unless the stage type sets this: then the N threads share one instance, whose `run`
    must be safe to call from several threads at once."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        by_hand = cls.__dict__.get("config_model")
        named = by_hand if isinstance(by_hand, type) else _config_model_named(cls)
        if named is not None:
            cls._config_model = named

    def __init__(self, config: ConfigT, context: StageContext) -> None:
        self.config: ConfigT = config
        self.context = context

    @classmethod
    def check_outputs(cls, config: ConfigT, outputs: Sequence[str]) -> list[str]:
        """Problems with this stage's outgoing edges given its config (e.g. a loop target)."""
        return []

    def prepare(self) -> None:
        """Load models and data. Runs before the start barrier, so it is never timed."""

    @abstractmethod
    def run(self, query: Query) -> Route:
        """Process one query visit; set `query.payload` to pass a result downstream."""

    def close(self) -> None:
        """Release resources. Called once after the stage's thread has stopped."""
