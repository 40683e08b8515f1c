"""A pipeline's stages as the runtime holds them: each stage's instances (one per thread of its
`concurrency`, or one shared by a `thread_safe` type), inbox and resolved output channels, built
from the stage graph. `PipelineRuntime` builds them once; stage threads and the routing read
them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from stages.runtime.channels import (
    AnyInbox,
    Channel,
    Inbox,
    JoinBuffer,
    JoinInbox,
    Outlet,
    PriorityInbox,
)
from stages.runtime.graph import StageGraph, StageNode
from stages.runtime.image_flow import images_in_by_stage
from stages.runtime.registry import StageRegistry
from stages.runtime.stage import Stage, StageContext

Output = tuple[str, Outlet, bool]
"""One outgoing edge: (target stage id, the target's channel for this stage, or its fused
hand-off, is a back-edge)."""


class RuntimeNode:
    """A stage's runtime state: its instances, inbox and resolved output channels."""

    def __init__(
        self,
        node: StageNode,
        stage: Stage[Any],
        inbox: Inbox,
        replicas: list[Stage[Any]] | None = None,
    ) -> None:
        """`replicas`: the instance of each of the stage's threads (default: `stage` alone)."""
        self.graph_node = node
        self.index = node.index
        self.name = node.id
        self.stage = stage
        """The first thread's instance (the only one unless `concurrency` > 1)."""
        self.replicas: list[Stage[Any]] = replicas or [stage]
        """Each thread's instance, in thread order (the same object N times if shared)."""
        self.inbox = inbox
        self.max_visits = node.spec.max_visits
        self.outputs: list[Output] = []
        self.output_by_name: dict[str, Output] = {}
        self.join: JoinBuffer | None = None
        self.threads: list[threading.Thread] = []

    def distinct_stages(self) -> list[Stage[Any]]:
        """Each instance once (prepared and closed once)."""
        return list({id(stage): stage for stage in self.replicas}.values())


def build_nodes(
    graph: StageGraph,
    registry: StageRegistry,
    context_of: Callable[[StageNode, int], StageContext],
    capacity: int,
) -> list[RuntimeNode]:
    """One runtime node per graph node, its stage instances built from the registry with its
    validated config and `context_of(node, replica)`, its outputs connected to the targets'
    inboxes."""
    classes = [registry.get(node.spec.type) for node in graph.nodes]
    configs = [
        stage_class.config_model.model_validate(node.spec.config)
        for stage_class, node in zip(classes, graph.nodes, strict=True)
    ]
    images_in = images_in_by_stage(graph, configs)

    def context(node: StageNode, replica: int) -> StageContext:
        built = context_of(node, replica)
        built.images_in = images_in[node.index]
        return built

    nodes = []
    for node, stage_class, config in zip(graph.nodes, classes, configs, strict=True):
        first = stage_class(config, context(node, 0))
        replicas = [first]
        for replica in range(1, node.spec.concurrency):
            shared = stage_class.thread_safe
            replicas.append(first if shared else stage_class(config, context(node, replica)))
        inbox = _make_inbox(node, graph, capacity)
        nodes.append(RuntimeNode(node, first, inbox, replicas))
    loop_edges = back_edges(graph)
    for runtime_node in nodes:
        _connect(runtime_node, nodes, loop_edges)
    return nodes


def entry_channels(nodes: list[RuntimeNode], graph: StageGraph) -> list[Channel]:
    """The channels the load generator feeds, one per entry stage."""
    return [nodes[index].inbox.channel_for(-1) for index in graph.entries]


def back_edges(graph: StageGraph) -> set[tuple[int, int]]:
    """Edges that close a cycle. Sends on them ignore the queue bound: two stages of a loop
    blocking on each other's full queues would otherwise deadlock."""
    edges = set()
    for component in graph.cycles():
        members = set(component)
        for source in component:
            for target in graph.nodes[source].outputs:
                if target in members and target <= source:
                    edges.add((source, target))
    return edges


def _make_inbox(node: StageNode, graph: StageGraph, capacity: int) -> Inbox:
    if node.spec.input_policy == "priority":
        assert node.spec.priorities is not None
        return PriorityInbox(capacity, [graph.index_of[name] for name in node.spec.priorities])
    if node.spec.input_policy == "join":
        return JoinInbox(capacity)
    return AnyInbox(capacity)


def _connect(
    runtime_node: RuntimeNode, nodes: list[RuntimeNode], loop_edges: set[tuple[int, int]]
) -> None:
    """Resolve a node's outputs to its targets' channels; give a join its buffer."""
    node = runtime_node.graph_node
    for target in node.outputs:
        target_node = nodes[target]
        entry = (
            target_node.name,
            target_node.inbox.channel_for(node.index),
            (node.index, target) in loop_edges,
        )
        runtime_node.outputs.append(entry)
        runtime_node.output_by_name[target_node.name] = entry
    if node.spec.input_policy == "join":
        runtime_node.join = JoinBuffer(
            list(dict.fromkeys(node.inputs)),
            {index: nodes[index].name for index in node.inputs},
        )
