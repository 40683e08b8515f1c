"""The asynchronous stage type: `run_async` is a coroutine, many visits in flight at once.

`class X(AsyncStage[XConfig])`, with `XConfig(AsyncStageConfig)`, implements
`async def run_async(self, query) -> Route`. The runtime drives each instance from one thread
running an asyncio event loop (`stages.runtime.async_thread`): up to `config.max_in_flight`
visits run at once, each recorded as a synchronous visit is (one stage row, started/finished
around the coroutine). `start_async` and `stop_async` run on that loop, so a client that must
belong to its loop (a connection pool) is made and closed there. With `concurrency: N` each
thread has its own instance and loop; a `thread_safe` type's one instance is started and
stopped on each of the N loops.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from typing import ClassVar, TypeVar

from pydantic import Field

from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig

DEFAULT_MAX_IN_FLIGHT = 64
MAX_IN_FLIGHT_LIMIT = 100_000


class AsyncStageConfig(StageConfig):
    """Base of an asynchronous stage type's config: how many visits may be in flight."""

    max_in_flight: int = Field(
        DEFAULT_MAX_IN_FLIGHT,
        ge=1,
        le=MAX_IN_FLIGHT_LIMIT,
        description="Visits of this stage running at once on its event loop (per thread of "
        "its `concurrency`); further queries wait in the stage's input queue.",
    )


AsyncConfigT = TypeVar("AsyncConfigT", bound=AsyncStageConfig)


class AsyncStage(Stage[AsyncConfigT]):
    """Base of asynchronous stage types: implement `run_async`; the runtime never calls `run`."""

    _config_model: ClassVar[type[StageConfig]] = AsyncStageConfig

    @abstractmethod
    async def run_async(self, query: Query) -> Route:
        """Process one query visit (a coroutine on the stage's event loop); same contract as
        `Stage.run`: set `query.payload`, return the route."""

    async def start_async(self) -> None:
        """Runs once on the stage's event loop before its first visit (after `prepare`)."""

    async def stop_async(self) -> None:
        """Runs once on the stage's event loop after its last visit (before `close`)."""

    def run(self, query: Query) -> Route:
        """One visit outside the runtime (a tool, a test): `run_async` on a fresh event loop."""
        return asyncio.run(self.run_async(query))
