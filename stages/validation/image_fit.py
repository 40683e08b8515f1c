"""Checks, before the run, that each model stage's model fits the image batches the stages
before it make (`StageConfig.images_problems`): channels, image size, and output width against
the dataset's classes or the entry's `labels`. A 1000-class model graded against 10 labels
reports accuracy 0 without this; with it, `collobench validate` says why in one line."""

from __future__ import annotations

from stages.runtime.graph import StageGraph
from stages.runtime.image_flow import images_in_by_stage
from stages.runtime.registry import StageRegistry, default_registry
from stages.spec.models import BenchmarkSpec
from stages.spec.problems import SpecProblem


def check_image_fit(
    spec: BenchmarkSpec, registry: StageRegistry | None = None
) -> list[SpecProblem]:
    """One problem per model stage whose model cannot take the image batches it gets (run
    after `check_spec` and the model entries' checks passed: configs validate, files exist)."""
    registry = registry or default_registry()
    problems = []
    for p, pipeline in enumerate(spec.pipelines):
        configs = [
            registry.get(stage.type).config_model.model_validate(stage.config)
            for stage in pipeline.stages
        ]
        flow = images_in_by_stage(StageGraph.from_pipeline(pipeline), configs)
        for s, (config, images_in) in enumerate(zip(configs, flow, strict=True)):
            if images_in is None:
                continue
            for field, message in config.images_problems(images_in):
                where = f"pipelines[{p}].stages[{s}].config.{field}"
                problems.append(SpecProblem(where, message))
    return problems
