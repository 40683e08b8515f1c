"""Semantic checks of a structurally valid spec: stage types, stage configs, and graph rules.

Each problem is a `SpecProblem` whose path points into the YAML, e.g.
`pipelines[0].stages[2].outputs[0]: no stage with id 'modle' (did you mean 'model'?)`.
"""

from __future__ import annotations

from pydantic import ValidationError

from stages.collocation_modes import COLLOCATION_MODES
from stages.runtime.async_stage import AsyncStage
from stages.runtime.fusion import fusion_problem
from stages.runtime.graph import StageGraph, StageNode
from stages.runtime.registry import StageRegistry, default_registry
from stages.spec.models import BenchmarkSpec, PipelineSpec, StageSpec

# Re-exported: the problem type and its formatting were defined here first.
from stages.spec.problems import SpecProblem as SpecProblem
from stages.spec.problems import did_you_mean, format_location
from stages.spec.problems import one_line as one_line
from stages.spec.problems import problems_from_validation_error as problems_from_validation_error
from stages.validation.service_checks import check_services

MAX_PIPELINES_ALL_SUBSETS = 6  # `collocation.subsets: all` runs 2^n - n - 2 subset phases


Where = tuple[int | str, ...]
"""A location in the spec document, e.g. ('pipelines', 0, 'stages', 2)."""


def _check_stage_config(stage: StageSpec, at: Where, registry: StageRegistry) -> list[SpecProblem]:
    """The stage type is registered and its config validates (with its outgoing edges)."""
    if stage.type not in registry:
        return [SpecProblem(format_location((*at, "type")), registry.unknown_message(stage.type))]
    stage_class = registry.get(stage.type)
    try:
        config = stage_class.config_model.model_validate(stage.config)
    except ValidationError as error:
        return problems_from_validation_error(error, (*at, "config"), stage_class.config_model)
    problems = [
        SpecProblem(format_location((*at, "outputs")), message)
        for message in stage_class.check_outputs(config, stage.outputs)
    ]
    if issubclass(stage_class, AsyncStage) and stage.input_policy != "any":
        problems.append(
            SpecProblem(
                format_location((*at, "input_policy")),
                f"asynchronous stage type '{stage.type}' needs input_policy 'any'",
            )
        )
    return problems


def _check_outputs(stage: StageSpec, at: Where, stage_ids: list[str]) -> list[SpecProblem]:
    """Every output names a stage of the pipeline, once."""
    problems = [
        SpecProblem(
            format_location((*at, "outputs", out_index)),
            f"no stage with id '{target}'{did_you_mean(target, stage_ids)}",
        )
        for out_index, target in enumerate(stage.outputs)
        if target not in stage_ids
    ]
    if stage.outputs and len(set(stage.outputs)) != len(stage.outputs):
        problems.append(SpecProblem(format_location((*at, "outputs")), "an output is listed twice"))
    return problems


def _check_stages(
    pipeline: PipelineSpec, where: Where, registry: StageRegistry
) -> tuple[list[SpecProblem], bool]:
    """Problems of each stage on its own, and whether the edges join unique ids (the graph
    rules need that)."""
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
        problems += _check_stage_config(stage, at, registry)
        problems += _check_outputs(stage, at, stage_ids)
    edges_valid = len(seen) == len(stage_ids) and all(
        target in seen for stage in pipeline.stages for target in stage.outputs
    )
    return problems, edges_valid


def _check_cycles(graph: StageGraph, where: Where) -> list[SpecProblem]:
    """A pipeline needs an entry; every loop is bounded and has no join on it."""
    problems: list[SpecProblem] = []
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
    return problems


def _input_policy_problems(graph: StageGraph, node: StageNode) -> list[tuple[str, str]]:
    """(field, message) for each way a stage's input policy does not fit its inputs."""
    input_ids = [graph.nodes[i].id for i in node.inputs]
    policy = node.spec.input_policy
    found: list[tuple[str, str]] = []
    if policy == "join" and len(set(node.inputs)) < 2:
        found.append(
            (
                "input_policy",
                f"join needs at least two inputs; '{node.id}' has {len(set(node.inputs))}",
            )
        )
    if policy != "priority":
        if node.spec.priorities is not None:
            found.append(("priorities", "only used with input_policy: priority"))
    elif not node.spec.priorities:
        found.append(
            ("priorities", f"input_policy priority needs `priorities` (inputs: {input_ids})")
        )
    elif sorted(node.spec.priorities) != sorted(input_ids):
        found.append(
            ("priorities", f"must list each input of '{node.id}' once: {sorted(input_ids)}")
        )
    return found


def _check_pipeline(
    pipeline: PipelineSpec, where: Where, registry: StageRegistry
) -> list[SpecProblem]:
    problems, edges_valid = _check_stages(pipeline, where, registry)
    if not edges_valid:
        return problems  # graph rules need valid edges between unique ids
    graph = StageGraph.from_pipeline(pipeline)
    problems += _check_cycles(graph, where)
    for node in graph.nodes:
        problems += [
            SpecProblem(format_location((*where, "stages", node.index, field)), message)
            for field, message in _input_policy_problems(graph, node)
        ]
    return problems + _check_fuse(graph, where, registry)


def _check_fuse(graph: StageGraph, where: Where, registry: StageRegistry) -> list[SpecProblem]:
    """A stage's own `fuse: true` must be possible (the pipeline's `fuse` takes only the links
    that are)."""

    def is_async(stage: StageSpec) -> bool:
        return stage.type in registry and issubclass(registry.get(stage.type), AsyncStage)

    problems = []
    for node in graph.nodes:
        if node.spec.fuse and (problem := fusion_problem(graph, node.index, is_async)):
            problems.append(
                SpecProblem(format_location((*where, "stages", node.index, "fuse")), problem)
            )
    return problems


def check_spec(spec: BenchmarkSpec, registry: StageRegistry | None = None) -> list[SpecProblem]:
    """Every semantic problem of `spec`; an empty list means it can run."""
    registry = registry or default_registry()
    problems: list[SpecProblem] = []
    names_seen: dict[str, int] = {}
    mode = COLLOCATION_MODES.get(spec.collocation.mode)
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
        problems += [
            SpecProblem(format_location(("pipelines", index, *where)), message)
            for where, message in mode.pipeline_problems(pipeline)
        ]
    if spec.collocation.subsets == "all" and len(spec.pipelines) > MAX_PIPELINES_ALL_SUBSETS:
        problems.append(
            SpecProblem(
                "collocation.subsets",
                f"'all' runs every subset of the {len(spec.pipelines)} pipelines "
                f"(2^{len(spec.pipelines)} phases); it allows at most "
                f"{MAX_PIPELINES_ALL_SUBSETS} pipelines: use 'pairs'",
            )
        )
    problems += _check_scheduling_policies(spec)
    pipelines = {pipeline.name for pipeline in spec.pipelines}
    return problems + check_services(spec.services, pipeline_names=pipelines)


def _check_scheduling_policies(spec: BenchmarkSpec) -> list[SpecProblem]:
    """A pipeline with a scheduling policy other than the default has its cores to itself:
    `cpus` given, and no other pipeline or started service may run on them (one without
    `cpus` may run on any core). A policy applied on a shared core would change what the
    contention figures measure."""
    problems: list[SpecProblem] = []
    for index, pipeline in enumerate(spec.pipelines):
        policy = pipeline.placement.scheduling_policy
        if policy == "other":
            continue
        at = format_location(("pipelines", index, "placement", "scheduling_policy"))
        cores = set(pipeline.placement.cpus or [])
        if not cores:
            problems.append(SpecProblem(at, f"'{policy}' needs placement.cpus for this pipeline"))
            continue
        neighbours = [
            (f"pipeline '{other.name}'", other.placement.cpus)
            for other in spec.pipelines
            if other is not pipeline
        ] + [
            (f"service '{service.name}'", service.placement.cpus)
            for service in spec.services
            if service.type != "external"  # not started here
        ]
        for name, cpus in neighbours:
            if cpus is None:
                reason = f"{name} has no placement.cpus (it may run on any core)"
            elif shared := sorted(cores & set(cpus)):
                reason = f"{name} also runs on cpus {shared}"
            else:
                continue
            problems.append(SpecProblem(at, f"'{policy}' needs cores of its own, but {reason}"))
    return problems
