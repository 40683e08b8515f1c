"""Which image batches reach each stage of a pipeline, as its stages declare them
(`StageConfig.images_out`): what the model stages are checked against before the run, at
validation (stages.validation.image_fit) and in `prepare` (`StageContext.images_in`)."""

from __future__ import annotations

from collections.abc import Sequence

from stages.contracts.image_batches import ImageBatch
from stages.runtime.graph import StageGraph
from stages.runtime.stage import StageConfig


def images_in_by_stage(
    graph: StageGraph, configs: Sequence[StageConfig]
) -> list[ImageBatch | None]:
    """Per stage (graph order), the image batches it gets: its one input stage's `images_out`;
    None for an entry stage, a stage with several inputs, or after a stage that does not say."""
    images_in: list[ImageBatch | None] = [None] * len(graph.nodes)
    # A chain settles in as many rounds as it is long; a loop keeps its first answer.
    for _ in graph.nodes:
        changed = False
        for node in graph.nodes:
            if len(node.inputs) != 1:
                continue
            (source,) = node.inputs
            before = configs[source].images_out(images_in[source])
            if before != images_in[node.index]:
                images_in[node.index] = before
                changed = True
        if not changed:
            break
    return images_in
