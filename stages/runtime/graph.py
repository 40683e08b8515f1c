"""The stage graph of one pipeline: nodes, edges, entries, exits, cycles, and a Mermaid drawing."""

from __future__ import annotations

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
        index_counter = 0
        order: dict[int, int] = {}
        low: dict[int, int] = {}
        stack: list[int] = []
        on_stack: set[int] = set()
        found: list[list[int]] = []

        def visit(start: int) -> None:
            # Iterative Tarjan so deep graphs cannot hit the recursion limit.
            nonlocal index_counter
            work = [(start, 0)]
            while work:
                node, edge_pos = work.pop()
                if edge_pos == 0:
                    order[node] = low[node] = index_counter
                    index_counter += 1
                    stack.append(node)
                    on_stack.add(node)
                outputs = self.nodes[node].outputs
                if edge_pos < len(outputs):
                    work.append((node, edge_pos + 1))
                    target = outputs[edge_pos]
                    if target not in order:
                        work.append((target, 0))
                    elif target in on_stack:
                        low[node] = min(low[node], order[target])
                    continue
                if low[node] == order[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in self.nodes[node].outputs:
                        found.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])

        for node in range(len(self.nodes)):
            if node not in order:
                visit(node)
        return found

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
