"""Self-RAG blocks: seeded decisions at the configured rates through the real runtime, the same
decisions on a rerun, other decisions with another seed, the bounded loop, and the shipped
spec's graph run with stand-ins for the text branch's model stages."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from stages.cli.app import app
from stages.library.self_rag.blocks import (
    GraderStage,
    HallucinationCheckStage,
    RewriterStage,
    RouterStage,
    decision_uniform,
)
from stages.runtime.driver import run_pipeline
from stages.runtime.query import Query
from stages.runtime.registry import stage_type
from stages.runtime.stage import Route, Stage
from stages.spec.models import PipelineSpec
from tests.helpers import REPO
from tests.library.rag_fixtures import DIMENSIONS, make_stage, query_with, write_corpus

# ----------------------------------------------------------------- stand-ins for text stages


@stage_type("test.rag_prompts")
class PromptsStandIn(Stage):
    """dataset.prompts stand-in: {prompt, prompt_id} from the query id."""

    def run(self, query: Query) -> Route:
        topic = ("kv cache", "batching", "attention")[query.query_id % 3]
        query.payload = {
            "prompt": f"Question {query.query_id} on {topic}?",
            "prompt_id": query.query_id,
            "topic": topic,
        }
        return None


@stage_type("test.rag_embed")
class EmbedStandIn(Stage):
    """transformers.embed stand-in: a unit vector seeded by the prompt's text."""

    def run(self, query: Query) -> Route:
        payload = dict(query.payload)
        seed = int.from_bytes(payload["prompt"].encode()[-8:].rjust(8, b"\0"), "big")
        vector = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
        payload["embedding"] = vector / np.linalg.norm(vector)
        query.payload = payload
        return None


@stage_type("test.rag_documents")
class DocumentsStandIn(Stage):
    """retrieval stand-in: five documents per query."""

    def run(self, query: Query) -> Route:
        documents = [{"doc_id": i, "score": 1.0 - i / 10, "text": f"d{i}"} for i in range(5)]
        query.payload = {**query.payload, "documents": documents}
        return None


@stage_type("test.rag_generate")
class GenerateStandIn(Stage):
    """transformers.generate stand-in: an answer naming the prompt and its documents."""

    def run(self, query: Query) -> Route:
        payload = dict(query.payload)
        documents = payload.get("documents") or []
        payload["text"] = f"answer to {payload['prompt']!r} from {len(documents)} documents"
        payload["new_tokens"] = 4
        query.payload = payload
        return None


# ----------------------------------------------------------------- the decision function


def test_decision_uniform_is_a_stable_uniform_hash() -> None:
    draws = [decision_uniform(3, "router", query_id, 1) for query_id in range(20_000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert abs(float(np.mean(draws)) - 0.5) < 0.01
    assert abs(float(np.mean(np.array(draws) < 0.2)) - 0.2) < 0.01
    # Fixed across processes and versions: a pinned value (blake2b, not Python's hash()).
    assert decision_uniform(0, "router", 0, 1) == 0.947194126633996
    assert decision_uniform(0, "router", 0, 2) != decision_uniform(0, "router", 0, 1)
    assert decision_uniform(0, "check", 0, 1) != decision_uniform(0, "router", 0, 1)
    assert decision_uniform(1, "router", 0, 1) != decision_uniform(0, "router", 0, 1)


# ----------------------------------------------------------------- blocks one by one


def test_router_names_its_outputs_and_checks_them(tmp_path: Path) -> None:
    config = {"retrieve_probability": 0.5, "retrieve_to": "search", "answer_to": "llm"}
    stage = make_stage(RouterStage, config, tmp_path, outputs=("search", "llm"), stage_id="r")
    routes = Counter(stage.run(query_with({}, query_id=q))[0] for q in range(2000))  # type: ignore[index]
    assert set(routes) == {"search", "llm"}
    assert abs(routes["search"] - 1000) < 4 * math.sqrt(2000 * 0.25)
    problems = RouterStage.check_outputs(RouterStage.config_model.model_validate(config), ["llm"])
    assert problems == ["retrieve_to 'search' must be listed in outputs"]


def test_grader_keeps_relevant_documents_at_the_configured_rate(tmp_path: Path) -> None:
    stage = make_stage(GraderStage, {"relevance_probability": 0.3}, tmp_path, stage_id="grade")
    documents = [{"doc_id": i, "score": 0.5, "text": str(i)} for i in range(20)]
    kept = 0
    for query_id in range(200):
        payload = {"prompt": "q", "documents": documents}
        query = query_with(payload, query_id=query_id)
        assert stage.run(query) is None
        relevant = query.payload["documents"]
        assert query.payload["relevance"] == {"retrieved": 20, "relevant": len(relevant)}
        assert all(document in documents for document in relevant)
        assert payload["documents"] is documents and len(documents) == 20  # upstream untouched
        kept += len(relevant)
    trials = 200 * 20
    assert abs(kept - 0.3 * trials) < 4 * math.sqrt(trials * 0.3 * 0.7)


def test_grader_routes_a_query_with_no_relevant_document(tmp_path: Path) -> None:
    stage = make_stage(
        GraderStage,
        {"relevance_probability": 0.0, "none_relevant_to": "rewrite"},
        tmp_path,
        outputs=("generate", "rewrite"),
    )
    query = query_with({"documents": [{"doc_id": 1, "text": "x"}]})
    assert stage.run(query) == ("rewrite",)
    assert query.payload["documents"] == []
    keeper = make_stage(
        GraderStage,
        {"relevance_probability": 1.0, "none_relevant_to": "rewrite"},
        tmp_path,
        outputs=("generate", "rewrite"),
    )
    assert keeper.run(query_with({"documents": [{"doc_id": 1, "text": "x"}]})) == ["generate"]


def test_check_accepts_at_its_last_attempt(tmp_path: Path) -> None:
    config = {"hallucination_probability": 1.0, "rewrite_to": "rewrite", "max_attempts": 3}
    stage = make_stage(HallucinationCheckStage, config, tmp_path, outputs=("rewrite",))
    for visit, expected in ((1, ("rewrite",)), (2, ("rewrite",)), (3, ())):
        query = query_with({"prompt": "q"}, visit=visit)
        assert tuple(stage.run(query) or ()) == expected
        assert query.payload["attempts"] == visit
        assert query.payload["supported"] is (visit == 3)


def test_rewriter_appends_the_next_phrase_and_drops_stale_fields(tmp_path: Path) -> None:
    stage = make_stage(RewriterStage, {"phrases": ["Be precise.", "Cite sources."]}, tmp_path)
    payload = {"prompt": "Why?", "prompt_id": 4, "embedding": [1.0], "documents": [], "text": "a"}
    texts = []
    for _ in range(3):
        query = query_with(payload)
        stage.run(query)
        payload = query.payload
        texts.append(payload["prompt"])
    assert texts == ["Why? Be precise.", "Why? Cite sources.", "Why? Be precise."]
    assert payload == {
        "prompt": "Why? Be precise.",
        "prompt_id": 4,
        "original_prompt": "Why?",
        "rewrites": 3,
    }


def test_blocks_bad_configs_are_one_validation_line(tmp_path: Path) -> None:
    stages: list[dict[str, Any]] = [
        {"id": "src", "type": "noop", "outputs": ["router"]},
        {
            "id": "router",
            "type": "self_rag.route",
            "config": {"retrieve_probability": 1.5, "retrieve_to": "a", "answer_to": "b"},
            "outputs": ["a", "b"],
        },
        {"id": "a", "type": "noop"},
        {"id": "b", "type": "noop"},
    ]
    spec: dict[str, Any] = {
        "name": "s",
        "pipelines": [{"name": "p", "loadgen": {"type": "closed_loop"}, "stages": stages}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"{path}: pipelines[0].stages[1].config.retrieve_probability: "
        "Input should be less than or equal to 1"
    )
    stages[1]["config"] = {"retrieve_to": "a", "answer_to": "elsewhere"}
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"{path}: pipelines[0].stages[1].outputs: answer_to 'elsewhere' must be listed in outputs"
    )


# ----------------------------------------------------------------- through the runtime

QUERIES = 2000
RETRIEVE_P = 0.3
HALLUCINATION_P = 0.25
MAX_ATTEMPTS = 3


def self_rag_pipeline(queries: int = QUERIES) -> PipelineSpec:
    stages = [
        {"id": "prompts", "type": "test.rag_prompts", "outputs": ["router"]},
        {
            "id": "router",
            "type": "self_rag.route",
            "config": {
                "retrieve_probability": RETRIEVE_P,
                "retrieve_to": "retrieve",
                "answer_to": "generate",
            },
            "outputs": ["retrieve", "generate"],
        },
        {"id": "retrieve", "type": "test.rag_documents", "outputs": ["grade"], "max_visits": 3},
        {"id": "grade", "type": "self_rag.grade", "outputs": ["generate"], "max_visits": 3},
        {"id": "generate", "type": "test.rag_generate", "outputs": ["check"], "max_visits": 3},
        {
            "id": "check",
            "type": "self_rag.check",
            "config": {
                "hallucination_probability": HALLUCINATION_P,
                "rewrite_to": "rewrite",
                "accept_to": "done",
                "max_attempts": MAX_ATTEMPTS,
            },
            "outputs": ["rewrite", "done"],
            "max_visits": 3,
        },
        {"id": "rewrite", "type": "self_rag.rewrite", "outputs": ["retrieve"], "max_visits": 2},
        {"id": "done", "type": "noop"},
    ]
    loadgen = {
        "type": "closed_loop",
        "concurrency": 16,
        "max_queries": queries,
        "min_queries": queries,
        "duration_s": 0,
        "timeout_s": 60,
    }
    return PipelineSpec.model_validate({"name": "rag", "loadgen": loadgen, "stages": stages})


def events(recorder: Any) -> list[tuple[int, str, int]]:
    """Every (query id, stage, visit) the run recorded, sorted: the decisions it took."""
    table = recorder.table("stage_events")
    assert set(table["status"]) == {"ok"}, Counter(table["status"])
    return sorted(zip(table["query_id"], table["stage"], table["visit"], strict=True))


def within(observed: int, trials: int, probability: float, sigmas: float = 4.0) -> bool:
    spread = sigmas * math.sqrt(trials * probability * (1 - probability))
    return abs(observed - trials * probability) <= spread


@pytest.fixture(scope="module")
def first_run() -> list[tuple[int, str, int]]:
    result, recorder = run_pipeline(self_rag_pipeline(), seed=11)
    assert result.status == "ok", result.error
    queries = recorder.table("queries")
    assert sorted(queries["query_id"]) == list(range(QUERIES))
    assert set(queries["status"]) == {"ok"}  # the bounded loop never hits max_visits
    return events(recorder)


def test_branch_and_loop_counts_match_the_probabilities(
    first_run: list[tuple[int, str, int]],
) -> None:
    visits = Counter((stage, visit) for _, stage, visit in first_run)
    assert visits[("router", 1)] == QUERIES
    # A routed query retrieves before each of its answers; a direct one only after a rewrite.
    per_query = Counter((query_id, stage) for query_id, stage, _ in first_run)
    routed = sum(per_query[(q, "retrieve")] == per_query[(q, "check")] for q in range(QUERIES))
    assert within(routed, QUERIES, RETRIEVE_P)
    # Every query is judged once; an unsupported answer loops back, at most twice.
    assert visits[("check", 1)] == QUERIES
    assert within(visits[("check", 2)], QUERIES, HALLUCINATION_P)
    assert within(visits[("check", 3)], visits[("check", 2)], HALLUCINATION_P)
    assert ("check", 4) not in visits
    rewrites = visits[("rewrite", 1)] + visits[("rewrite", 2)]
    assert rewrites == visits[("check", 2)] + visits[("check", 3)]
    assert visits[("done", 1)] == QUERIES
    # A rewrite goes back through retrieval: generate runs once per check.
    generates = sum(count for (stage, _), count in visits.items() if stage == "generate")
    assert generates == sum(count for (stage, _), count in visits.items() if stage == "check")


def test_a_rerun_repeats_every_decision_and_another_seed_changes_them(
    first_run: list[tuple[int, str, int]],
) -> None:
    again, recorder = run_pipeline(self_rag_pipeline(), seed=11)
    assert again.status == "ok"
    assert events(recorder) == first_run
    other, recorder = run_pipeline(self_rag_pipeline(), seed=12)
    assert other.status == "ok"
    different = events(recorder)
    assert different != first_run
    routed = {q for q, stage, _ in first_run if stage == "retrieve"}
    routed_other = {q for q, stage, _ in different if stage == "retrieve"}
    # Independent draws: the overlap is about p * p of the queries, far from all of them.
    assert len(routed & routed_other) < 0.5 * len(routed)


def shipped_spec_with_stand_ins(corpus_path: Path) -> PipelineSpec:
    """specs/self_rag.yaml's pipeline, the text branch's model stages replaced by stand-ins
    and the corpus artefact by a test corpus, under a short closed-loop load."""
    document = yaml.safe_load((REPO / "specs" / "self_rag.yaml").read_text())
    (pipeline,) = document["pipelines"]
    stand_ins = {
        "dataset.prompts": "test.rag_prompts",
        "transformers.embed": "test.rag_embed",
        "transformers.generate": "test.rag_generate",
    }
    for stage in pipeline["stages"]:
        if stage["type"] in stand_ins:
            stage["type"] = stand_ins[stage["type"]]
            stage.pop("config", None)
        config = stage.get("config", {})
        if config.get("corpus") == "rag_corpus":
            del config["corpus"]
            config["corpus_path"] = str(corpus_path)
    pipeline["loadgen"] = {
        "type": "closed_loop",
        "concurrency": 8,
        "max_queries": 300,
        "min_queries": 300,
        "duration_s": 0,
        "timeout_s": 60,
    }
    return PipelineSpec.model_validate(pipeline)


def test_shipped_spec_runs_with_fork_join_and_loop(tmp_path: Path) -> None:
    corpus_path, _ = write_corpus(tmp_path / "corpus")
    spec = shipped_spec_with_stand_ins(corpus_path)
    result, recorder = run_pipeline(spec, seed=0)
    assert result.status == "ok", result.error
    assert set(recorder.table("queries")["status"]) == {"ok"}
    visits = Counter((stage, visit) for _, stage, visit in events(recorder))
    routed = visits[("hybrid", 1)]
    assert 0 < routed < 300
    # Fork and join: both retrievers ran for every routed query and the join merged each once.
    assert visits[("vector", 1)] == visits[("keyword", 1)] == visits[("fuse", 1)] == routed
    # The loop: rewrites re-embed and search again, then grade and answer again.
    assert visits[("rewrite", 1)] > 0
    assert visits[("requery", 1)] == visits[("reembed", 1)] == visits[("rewrite", 1)]
    assert ("check", 4) not in visits
    table = recorder.table("stage_events")
    joined = [
        j for stage, j in zip(table["stage"], table["joined_ns"], strict=True) if stage == "fuse"
    ]
    assert all(j is not None for j in joined)


def test_shipped_spec_passes_the_spec_checks_but_for_the_text_branch_types() -> None:
    """The spec's own blocks and graph are valid; the only problems allowed on this branch
    are the text branch's stage types and artefact, which arrive when it merges."""
    document = yaml.safe_load((REPO / "specs" / "self_rag.yaml").read_text())
    from stages.spec.models import BenchmarkSpec
    from stages.validation.checks import check_spec

    problems = check_spec(BenchmarkSpec.model_validate(document))
    allowed = (
        "unknown stage type 'dataset.prompts'",
        "unknown stage type 'transformers.",
        "unknown artefact 'rag_corpus'",
    )
    assert all(any(text in problem.message for text in allowed) for problem in problems), problems


@pytest.mark.parametrize("work", ["sleep", "busy"])
def test_work_ms_stands_in_for_the_model_cost(tmp_path: Path, work: str) -> None:
    import time

    config = {"retrieve_to": "a", "answer_to": "b", "work_ms": 5, "work": work}
    stage = make_stage(RouterStage, config, tmp_path, outputs=("a", "b"))
    clock = time.thread_time_ns if work == "busy" else time.monotonic_ns
    began = clock()
    for query_id in range(4):
        stage.run(query_with({}, query_id=query_id))
    spent_ms = (clock() - began) / 1e6
    assert spent_ms >= 4 * 5 * (0.6 if work == "busy" else 1.0), spent_ms
