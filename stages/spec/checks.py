"""Semantic checks of a structurally valid spec: stage types, stage configs, and graph rules.

Each problem is a `SpecProblem` whose path points into the YAML, e.g.
`pipelines[0].stages[2].outputs[0]: no stage with id 'modle' (did you mean 'model'?)`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import get_args

from pydantic import BaseModel, ValidationError

from stages.runtime.graph import StageGraph
from stages.runtime.registry import StageRegistry, default_registry
from stages.spec.models import BenchmarkSpec, PipelineSpec

MAX_PIPELINES_ALL_SUBSETS = 6  # `collocation.subsets: all` runs 2^n - n - 2 subset phases


@dataclass(frozen=True)
class SpecProblem:
    """One reason a spec is invalid, anchored at a path into the document."""

    path: str
    message: str

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return one_line(text)


def one_line(text: str) -> str:
    """Escape line breaks and other unprintable characters: one problem, one line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def format_location(location: tuple[int | str, ...]) -> str:
    """('pipelines', 0, 'stages', 2) -> 'pipelines[0].stages[2]'."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not str(part).isidentifier():
            text += f"[{str(part)!r}]"  # a key a YAML author could not have meant as a name
        else:
            text += f".{part}" if text else str(part)
    return text


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _model_at(model: type[BaseModel], location: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model a location inside `model` points at, following nested fields."""
    current: object = model
    for part in location:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = field.annotation
        # Unwrap list[X] and X | None down to a model class, if there is one.
        while not (isinstance(current, type) and issubclass(current, BaseModel)):
            models = [arg for arg in get_args(current) if arg is not type(None)]
            if len(models) != 1:
                break
            current = models[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def problems_from_validation_error(
    error: ValidationError,
    prefix: tuple[int | str, ...] = (),
    model: type[BaseModel] | None = None,
) -> list[SpecProblem]:
    """Turn pydantic errors into one readable problem each (`model`: what was validated)."""
    problems = []
    for item in error.errors(include_url=False):
        location = prefix + tuple(item["loc"])
        message = item["msg"]
        kind = item["type"]
        if kind == "extra_forbidden":
            key = str(item["loc"][-1])
            parent = _model_at(model, tuple(item["loc"][:-1])) if model else None
            allowed = list(parent.model_fields) if parent else []
            message = f"unknown key '{key}'{_did_you_mean(key, allowed)}"
            if parent and not _did_you_mean(key, allowed):
                message += f"; allowed: {', '.join(allowed) or 'none'}"
        elif kind == "missing":
            message = "required key is missing"
        elif kind.startswith("value_error") and message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        elif kind == "literal_error":
            message = f"{message}, got {item['input']!r}"
        # A model-level validator reports at its own location; keep the path to the model.
        problems.append(SpecProblem(format_location(location), message))
    return problems


def _check_pipeline(
    pipeline: PipelineSpec, where: tuple[int | str, ...], registry: StageRegistry
) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    stage_ids = [stage.id for stage in pipeline.stages]
    seen: dict[str, int] = {}
    for index, stage in enumerate(pipeline.stages):
        at = (*where, "stages", index)
        if stage.id in seen:
            problems.append(
                SpecProblem(
                    format_location((*at, "id")),
                    f"duplicate stage id '{stage.id}' (also stages[{seen[stage.id]}])",
                )
            )
        else:
            seen[stage.id] = index
        if stage.type not in registry:
            problems.append(
                SpecProblem(format_location((*at, "type")), registry.unknown_message(stage.type))
            )
        else:
            stage_class = registry.get(stage.type)
            try:
                config = stage_class.config_model.model_validate(stage.config)
            except ValidationError as error:
                problems += problems_from_validation_error(
                    error, (*at, "config"), stage_class.config_model
                )
            else:
                for message in stage_class.check_outputs(config, stage.outputs):
                    problems.append(SpecProblem(format_location((*at, "outputs")), message))
        for out_index, target in enumerate(stage.outputs):
            if target not in stage_ids:
                problems.append(
                    SpecProblem(
                        format_location((*at, "outputs", out_index)),
                        f"no stage with id '{target}'{_did_you_mean(target, stage_ids)}",
                    )
                )
        if stage.outputs and len(set(stage.outputs)) != len(stage.outputs):
            problems.append(
                SpecProblem(format_location((*at, "outputs")), "an output is listed twice")
            )
    edges_valid = len(seen) == len(stage_ids) and all(
        target in seen for stage in pipeline.stages for target in stage.outputs
    )
    if not edges_valid:
        return problems  # graph rules need valid edges between unique ids

    graph = StageGraph.from_pipeline(pipeline)
    if not graph.entries:
        problems.append(
            SpecProblem(
                format_location((*where, "stages")),
                "no entry stage: the load generator has nowhere to send queries",
            )
        )
    for component in graph.cycles():
        for index in component:
            if graph.nodes[index].spec.input_policy == "join":
                problems.append(
                    SpecProblem(
                        format_location((*where, "stages", index, "input_policy")),
                        f"join stage '{graph.nodes[index].id}' is on a loop: a query coming "
                        "round again would wait for inputs that deliver only once; join before "
                        "or after the loop",
                    )
                )
        if not any(graph.nodes[index].spec.max_visits for index in component):
            names = ", ".join(graph.nodes[index].id for index in component)
            problems.append(
                SpecProblem(
                    format_location((*where, "stages", component[0])),
                    f"cycle through {names} has no stage with `max_visits`; set it on one of "
                    "them to bound the loop",
                )
            )
    for node in graph.nodes:
        at = (*where, "stages", node.index)
        input_ids = [graph.nodes[i].id for i in node.inputs]
        policy = node.spec.input_policy
        if policy == "join" and len(set(node.inputs)) < 2:
            problems.append(
                SpecProblem(
                    format_location((*at, "input_policy")),
                    f"join needs at least two inputs; '{node.id}' has {len(set(node.inputs))}",
                )
            )
        if policy == "priority":
            if not node.spec.priorities:
                problems.append(
                    SpecProblem(
                        format_location((*at, "priorities")),
                        f"input_policy priority needs `priorities` (inputs: {input_ids})",
                    )
                )
            elif sorted(node.spec.priorities) != sorted(input_ids):
                problems.append(
                    SpecProblem(
                        format_location((*at, "priorities")),
                        f"must list each input of '{node.id}' once: {sorted(input_ids)}",
                    )
                )
        elif node.spec.priorities is not None:
            problems.append(
                SpecProblem(
                    format_location((*at, "priorities")),
                    "only used with input_policy: priority",
                )
            )
    return problems


def check_spec(spec: BenchmarkSpec, registry: StageRegistry | None = None) -> list[SpecProblem]:
    """Every semantic problem of `spec`; an empty list means it can run."""
    registry = registry or default_registry()
    problems: list[SpecProblem] = []
    names_seen: dict[str, int] = {}
    for index, pipeline in enumerate(spec.pipelines):
        if pipeline.name in names_seen:
            problems.append(
                SpecProblem(
                    format_location(("pipelines", index, "name")),
                    f"duplicate pipeline name '{pipeline.name}' "
                    f"(also pipelines[{names_seen[pipeline.name]}])",
                )
            )
        names_seen.setdefault(pipeline.name, index)
        problems += _check_pipeline(pipeline, ("pipelines", index), registry)
        if spec.collocation.mode == "cpu_pinned" and pipeline.placement.cpus is None:
            problems.append(
                SpecProblem(
                    format_location(("pipelines", index, "placement", "cpus")),
                    "collocation mode cpu_pinned needs cpus for every pipeline",
                )
            )
        if spec.collocation.mode in ("mps", "mig") and not pipeline.device.startswith("cuda"):
            problems.append(
                SpecProblem(
                    format_location(("pipelines", index, "device")),
                    f"collocation mode {spec.collocation.mode} needs a cuda device",
                )
            )
        if spec.collocation.mode == "mig" and not pipeline.placement.mig:
            problems.append(
                SpecProblem(
                    format_location(("pipelines", index, "placement", "mig")),
                    "collocation mode mig needs a MIG instance UUID per pipeline",
                )
            )
    if spec.collocation.subsets == "all" and len(spec.pipelines) > MAX_PIPELINES_ALL_SUBSETS:
        problems.append(
            SpecProblem(
                "collocation.subsets",
                f"'all' runs every subset of the {len(spec.pipelines)} pipelines "
                f"(2^{len(spec.pipelines)} phases); it allows at most "
                f"{MAX_PIPELINES_ALL_SUBSETS} pipelines: use 'pairs'",
            )
        )
    return problems
