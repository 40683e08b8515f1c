"""Stage fusion (`fuse: true`): a stage run by the thread of the stage before it, right after
it, for every query, instead of by a thread of its own.

A thread hand-off costs a queue put, a wake-up and a context switch (see
`../shared/research/hotpath.md`); for a sub-millisecond model that is a large share of a query.
Fusing a linear link removes it and gives up pipelining across the link: the fused stages
serve one query at a time between them. Each stage still records its own row (started and
finished), its `enqueued_ns` the moment the stage before it finished, so every view reads a
fused run as it reads any other.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stages.runtime.graph import StageGraph
from stages.spec.models import PipelineSpec, StageSpec

if TYPE_CHECKING:
    from stages.runtime.stage_thread import StageThread

MAX_FUSED_CHAIN = 32
"""Stages one thread runs at most: each fused stage is called from the one before it, so a
chain costs a few stack frames per stage; a longer chain is split into threads of 32."""


def fusion_problem(
    graph: StageGraph, index: int, is_async: Callable[[StageSpec], bool]
) -> str | None:
    """Why stage `index` cannot run in the thread of the stage before it (None: it can)."""
    node = graph.nodes[index]
    if len(node.inputs) != 1:
        return f"fuse needs exactly one input stage; '{node.id}' has {len(node.inputs)}"
    before = graph.nodes[node.inputs[0]]
    if len(before.outputs) != 1:
        return (
            f"fuse needs a linear link; '{before.id}', the stage before it, has "
            f"{len(before.outputs)} outputs"
        )
    if any(index in component for component in graph.cycles()):
        return "fuse cannot take a stage on a cycle"
    for stage in (before.spec, node.spec):
        if stage.concurrency != 1:
            return f"fuse needs concurrency 1; '{stage.id}' has {stage.concurrency}"
        if is_async(stage):
            return f"fuse needs synchronous stages; '{stage.id}' runs its own event loop"
    if node.spec.input_policy != "any":
        return f"fuse needs input_policy 'any'; '{node.id}' has '{node.spec.input_policy}'"
    return None


def fused_links(
    pipeline: PipelineSpec, graph: StageGraph, is_async: Callable[[StageSpec], bool]
) -> dict[int, int]:
    """Stage index -> the index of the stage whose thread runs it, for every stage fused by
    its own `fuse` or the pipeline's (the pipeline's fuses only the links that can be)."""
    links = {
        node.index: node.inputs[0]
        for node in graph.nodes
        if (node.spec.fuse or pipeline.fuse) and fusion_problem(graph, node.index, is_async) is None
    }
    for index in sorted(links, key=lambda index: _depth(links, index)):
        if _depth(links, index) >= MAX_FUSED_CHAIN:
            del links[index]  # this stage starts a new chain, in a thread of its own
    return links


def _depth(links: dict[int, int], index: int) -> int:
    """How many stages before `index` its thread runs (0: it heads a chain)."""
    depth = 0
    while index in links:
        index, depth = links[index], depth + 1
    return depth


def chain_head(links: dict[int, int], index: int) -> int:
    """The stage whose thread runs stage `index` (itself when it is not fused)."""
    while index in links:
        index = links[index]
    return index


class FusedHandOff:
    """Stands in for a fused stage's input channel on the output of the stage before it: a
    query sent here is served by the fused stage at once, in the sending thread."""

    __slots__ = ("body", "qsize", "raw_put")

    capacity = sys.maxsize
    """Never full: the fused stage runs before `put` returns."""

    def __init__(self) -> None:
        self.body: StageThread | None = None
        """The fused stage's body (`attach`)."""
        self.qsize: Callable[[], int] = itertools.repeat(0).__next__
        """Always 0, as a C call: the sending loop's room check costs no Python frame."""
        self.raw_put: Callable[[Any], None] = self.put_unbounded
        """The fused stage's `serve_one` once attached: the sending loop calls it directly."""

    def attach(self, body: StageThread) -> None:
        """The fused stage's body, built once every link is rewired."""
        self.body = body
        self.raw_put = body.serve_one

    def full(self) -> bool:
        return False

    def put(self, item: Any, timeout: float | None = None) -> bool:
        self.put_unbounded(item)
        return True

    def put_unbounded(self, item: Any) -> None:
        assert self.body is not None
        self.body.serve_one(item)
