"""Makes a token-exact prompt builder count for the API its prompts are sent over, before the
run: each stage's `follow_prompt_apis` gets the stages downstream that send its prompts (their
`prompt_api`: http.openai's `api`), fills in what it left unset (`dataset.synthetic_prompts`'
`count_as`) and names a setting that contradicts them. Counted for the chat template while the
completions API encodes the bare text, every prompt would arrive 20 tokens short, unchecked."""

from __future__ import annotations

from stages.runtime.graph import StageGraph
from stages.runtime.registry import StageRegistry, default_registry
from stages.runtime.stage import StageConfig
from stages.spec.models import BenchmarkSpec
from stages.spec.problems import SpecProblem


def prompt_senders(graph: StageGraph, configs: list[StageConfig], start: int) -> dict[str, str]:
    """The stages that send the prompts stage `start` builds (stage id -> API): the first stage
    with a `prompt_api` on each path downstream (a stage between passes the payload on)."""
    senders: dict[str, str] = {}
    seen = {start}
    frontier = list(graph.nodes[start].outputs)
    while frontier:
        index = frontier.pop()
        if index in seen:
            continue
        seen.add(index)
        api = configs[index].prompt_api()
        if api is not None:
            senders[graph.nodes[index].id] = api
        else:
            frontier.extend(graph.nodes[index].outputs)
    return senders


def follow_prompt_apis(
    spec: BenchmarkSpec, registry: StageRegistry | None = None
) -> tuple[BenchmarkSpec, list[SpecProblem]]:
    """(the spec with each prompt builder's unset count filled in, one problem per setting
    that contradicts the API its prompts go over). Run after `check_spec` passed."""
    registry = registry or default_registry()
    problems: list[SpecProblem] = []
    pipelines = [pipeline.model_copy(deep=True) for pipeline in spec.pipelines]
    for p, pipeline in enumerate(pipelines):
        configs = [
            registry.get(stage.type).config_model.model_validate(stage.config)
            for stage in pipeline.stages
        ]
        graph = StageGraph.from_pipeline(pipeline)
        for s, (stage, config) in enumerate(zip(pipeline.stages, configs, strict=True)):
            filled, found = config.follow_prompt_apis(prompt_senders(graph, configs, s))
            if filled:
                stage.config = {**stage.config, **filled}
            problems += [
                SpecProblem(f"pipelines[{p}].stages[{s}].config.{field}", message)
                for field, message in found
            ]
    return spec.model_copy(update={"pipelines": pipelines}), problems
