"""The stage graph of one pipeline: nodes, edges, entries, exits, cycles, and a Mermaid drawing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stages.spec.models import PipelineSpec, StageSpec


@dataclass(frozen=True)
class StageNode:
    index: int
    spec: StageSpec
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def id(self) -> str:
        return self.spec.id


class StageGraph:
    """Directed graph of a pipeline's stages. Build it from a spec that passed `check_spec`."""

    def __init__(self, stage_specs: list[StageSpec]) -> None:
        self.index_of = {spec.id: index for index, spec in enumerate(stage_specs)}
        inputs: list[list[int]] = [[] for _ in stage_specs]
        for index, spec in enumerate(stage_specs):
            for target in spec.outputs:
                inputs[self.index_of[target]].append(index)
        self.nodes = [
            StageNode(
                index=index,
                spec=spec,
                inputs=tuple(inputs[index]),
                outputs=tuple(self.index_of[target] for target in spec.outputs),
            )
            for index, spec in enumerate(stage_specs)
        ]

    @classmethod
    def from_pipeline(cls, pipeline: PipelineSpec) -> StageGraph:
        return cls(pipeline.stages)

    @property
    def entries(self) -> list[int]:
        """Stages the load generator feeds: those with no inputs, and for a loop that nothing
        outside feeds (generate <-> critique), its first stage in spec order."""
        entries = {node.index for node in self.nodes if not node.inputs}
        for component in self.cycles():
            members = set(component)
            fed_from_outside = any(
                source not in members for index in component for source in self.nodes[index].inputs
            )
            if not fed_from_outside:
                entries.add(min(component))
        return sorted(entries)

    @property
    def exits(self) -> list[int]:
        """Pipeline outputs: stages with no outputs."""
        return [node.index for node in self.nodes if not node.outputs]

    def cycles(self) -> list[list[int]]:
        """Strongly connected components that form a cycle (Tarjan), each as sorted indices."""
        return _Tarjan([node.outputs for node in self.nodes]).cycles()

    def mermaid(self) -> str:
        """Mermaid flowchart text (README, Dagster UI)."""
        lines = ["flowchart LR", "    loadgen([loadgen])"]
        for node in self.nodes:
            label = f"{node.id}<br/>{node.spec.type}"
            if node.spec.input_policy != "any":
                label += f"<br/>({node.spec.input_policy})"
            lines.append(f'    {node.id}["{label}"]')
        for entry in self.entries:
            lines.append(f"    loadgen --> {self.nodes[entry].id}")
        for node in self.nodes:
            for target in node.outputs:
                lines.append(f"    {node.id} --> {self.nodes[target].id}")
            if not node.outputs:
                lines.append(f"    {node.id} --> done([done])")
        return "\n".join(dict.fromkeys(lines))


class _Tarjan:
    """Tarjan's strongly connected components over successor lists, iterative so deep graphs
    cannot hit the recursion limit; keeps the components that form a cycle."""

    def __init__(self, outputs: Sequence[Sequence[int]]) -> None:
        self.outputs = outputs
        self.counter = 0
        self.order: dict[int, int] = {}
        self.low: dict[int, int] = {}
        self.stack: list[int] = []
        self.on_stack: set[int] = set()
        self.found: list[list[int]] = []

    def cycles(self) -> list[list[int]]:
        for node in range(len(self.outputs)):
            if node not in self.order:
                self._visit(node)
        return self.found

    def _visit(self, start: int) -> None:
        work = [(start, 0)]  # (node, position of its next outgoing edge)
        while work:
            node, edge_pos = work.pop()
            if edge_pos == 0:
                self._enter(node)
            outputs = self.outputs[node]
            if edge_pos < len(outputs):
                work.append((node, edge_pos + 1))
                target = outputs[edge_pos]
                if target not in self.order:
                    work.append((target, 0))
                elif target in self.on_stack:
                    self.low[node] = min(self.low[node], self.order[target])
                continue
            if self.low[node] == self.order[node]:
                self._close_component(node)
            if work:
                parent = work[-1][0]
                self.low[parent] = min(self.low[parent], self.low[node])

    def _enter(self, node: int) -> None:
        self.order[node] = self.low[node] = self.counter
        self.counter += 1
        self.stack.append(node)
        self.on_stack.add(node)

    def _close_component(self, root: int) -> None:
        """Pop `root`'s component off the stack; keep it if it is a cycle (a self-loop counts)."""
        component = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            component.append(member)
            if member == root:
                break
        if len(component) > 1 or root in self.outputs[root]:
            self.found.append(sorted(component))
