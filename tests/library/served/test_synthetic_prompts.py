"""`dataset.synthetic_prompts` with tiny_lm's real tokenizer (built locally): prompts of exactly
the asked token count however it is counted, lengths drawn from seeded distributions that
repeat on a rerun, a trace's lengths winning, clipping to the model's context; and
`http.openai` asking for the payload's output length, recording the server's prompt_tokens
and failing a visit whose usage differs from what was asked (the scripted stub server)."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from stages.library.models.common import ModelFileError
from stages.library.served.exact_prompts import PromptLengthError
from stages.library.served.openai_http import OpenAIStage
from stages.library.served.synthetic_prompts import SyntheticPromptsConfig, SyntheticPromptsStage
from stages.library.served.token_lengths import EmpiricalLength, query_rng, sample_length
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig, StageContext
from stages.spec.model_entry import content_sha256
from stages.spec.models import PipelineSpec
from stages.validation.loading import load_spec
from tests.helpers import registry_with, rows, run_in_process
from tests.library.openai_calibration import make_query
from tests.library.openai_stub import Script, ThreadedStub
from tests.library.served.test_openai_http import make_stage as make_http_stage

TINY_LM_CONTEXT = 256


def make_stage(seed: int = 0, replica: int = 0, **config: Any) -> SyntheticPromptsStage:
    context = StageContext(stage_id="prompts", seed=seed, replica=replica)
    stage = SyntheticPromptsStage(SyntheticPromptsConfig.model_validate(config), context)
    stage.prepare()
    return stage


def built(stage: SyntheticPromptsStage, query_id: int, payload: Any = None) -> dict[str, Any]:
    query = Query(query_id, 0, stage_count=1, payload=payload)
    stage.run(query)
    assert isinstance(query.payload, dict)
    return query.payload


@pytest.mark.slow
@pytest.mark.parametrize("count_as", ["chat", "completions", "text"])
@pytest.mark.parametrize("tokens", [24, 32, 100, 128, 200])
def test_prompts_have_exactly_the_asked_tokens(count_as: str, tokens: int) -> None:
    stage = make_stage(input_tokens=tokens, count_as=count_as)
    for query_id in range(12):
        payload = built(stage, query_id)
        assert stage.builder.count(payload["prompt"]) == tokens == payload["input_tokens"]
        assert payload["counted_as"] == count_as
        assert payload["text_tokens"] == stage.builder.count_text(payload["prompt"])
    if count_as == "chat":  # the template's own tokens are not the text's
        assert payload["text_tokens"] < tokens


def test_the_chat_count_is_what_the_chat_template_gives() -> None:
    stage = make_stage(input_tokens=128)
    tokenizer = _tokenizer()
    payload = built(stage, 3)
    messages = [{"role": "user", "content": payload["prompt"]}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert len(ids["input_ids"]) == 128


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from stages.artifacts.registry import ensure_artifact

    return AutoTokenizer.from_pretrained(ensure_artifact("tiny_lm", {}).path, local_files_only=True)


SPEC = """\
name: synthetic
pipelines:
  - name: p
    loadgen: {type: closed_loop, concurrency: 1, duration_s: 1}
    stages:
      - {id: prompts, type: dataset.synthetic_prompts, config: {tokenizer: {path: lm}}}
"""


def test_a_folder_entry_builds_what_the_named_tokenizer_builds(tmp_path: Path) -> None:
    from stages.artifacts.registry import ensure_artifact

    folder = tmp_path / "lm"
    shutil.copytree(ensure_artifact("tiny_lm", {}).path, folder)
    by_path = make_stage(2, tokenizer={"path": str(folder)}, input_tokens=77)
    assert built(by_path, 1) == built(make_stage(2, input_tokens=77), 1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    loaded = load_spec(spec)  # the entry resolved and hashed as a model entry is
    entry = loaded.normalized["pipelines"][0]["stages"][0]["config"]["tokenizer"]
    assert (entry["path"], entry["sha256"]) == (str(folder.resolve()), content_sha256(folder))
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ModelFileError, match="lm: cannot load a tokenizer: the tokenizer is empty"):
        make_stage(tokenizer={"path": str(folder)})
    with pytest.raises(ValidationError, match="a tokenizer entry is a Hugging Face folder"):
        SyntheticPromptsConfig.model_validate({"tokenizer": {"onnx": "m.onnx"}})


DISTRIBUTIONS: list[Any] = [
    {"distribution": "normal", "mean": 96, "std": 20},
    {"distribution": "lognormal", "mean": 96, "std": 30},
    {"distribution": "uniform", "low": 40, "high": 150},
    {"distribution": "empirical", "values": [30, 64, 180], "weights": [1, 2, 1]},
]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_drawn_lengths_are_exact_seeded_and_repeat_on_a_rerun(distribution: Any) -> None:
    config = {"input_tokens": distribution, "output_tokens": distribution}
    first, again, other = make_stage(5, **config), make_stage(5, **config), make_stage(6, **config)
    payloads = [built(first, query_id) for query_id in range(40)]
    # A rerun (a new stage, queries in another order) builds the same prompts.
    rerun = {q: built(again, q) for q in reversed(range(40))}
    assert payloads == [rerun[q] for q in range(40)]
    assert [built(other, q) for q in range(40)] != payloads  # the seed matters
    lengths = [p["input_tokens"] for p in payloads]
    assert len(set(lengths)) > 2  # drawn, not one fixed length
    for payload in payloads:
        assert first.builder.count(payload["prompt"]) == payload["input_tokens"]
        assert 1 <= payload["output_tokens"] <= TINY_LM_CONTEXT - payload["input_tokens"]
    if distribution["distribution"] == "empirical":
        assert set(lengths) <= {30, 64, 180}
    if distribution["distribution"] == "uniform":
        assert min(lengths) >= 40 and max(lengths) <= 150


def test_an_empirical_list_is_drawn_by_its_weights() -> None:
    empirical = EmpiricalLength(distribution="empirical", values=[10, 20], weights=[3, 1])
    drawn = [sample_length(empirical, query_rng(0, q, "input_tokens"), 1, 100) for q in range(2000)]
    assert set(drawn) == {10, 20}
    assert 0.70 < drawn.count(10) / len(drawn) < 0.80


def test_normal_and_lognormal_have_the_asked_mean() -> None:
    for kind in ("normal", "lognormal"):
        length = SyntheticPromptsConfig.model_validate(
            {"input_tokens": {"distribution": kind, "mean": 500, "std": 100}}
        ).input_tokens
        drawn = [sample_length(length, query_rng(1, q, "x"), 1, 10_000) for q in range(4000)]
        assert statistics.mean(drawn) == pytest.approx(500, rel=0.03), kind
        assert statistics.stdev(drawn) == pytest.approx(100, rel=0.1), kind


def test_lengths_are_clipped_to_the_prompt_floor_and_the_context() -> None:
    stage = make_stage(input_tokens=1000, output_tokens=1000)
    payload = built(stage, 0)
    assert payload["input_tokens"] == TINY_LM_CONTEXT - 1 and payload["output_tokens"] == 1
    assert stage.builder.count(payload["prompt"]) == TINY_LM_CONTEXT - 1
    small = built(make_stage(input_tokens=1, output_tokens=0 + 1), 0)
    assert small["input_tokens"] == make_stage().builder.min_tokens  # the template's floor
    capped = built(make_stage(input_tokens=100, output_tokens=50, max_model_tokens=120), 0)
    assert (capped["input_tokens"], capped["output_tokens"]) == (100, 20)


def test_a_traces_lengths_win_and_its_fields_are_kept() -> None:
    stage = make_stage(input_tokens=64, output_tokens=8)
    payload = built(stage, 4, {"input_tokens": 150, "output_tokens": 33, "hash_ids": [1, 2]})
    assert (payload["input_tokens"], payload["output_tokens"]) == (150, 33)
    assert payload["hash_ids"] == [1, 2]
    assert stage.builder.count(payload["prompt"]) == 150


def test_a_traces_length_beyond_the_model_fails_the_visit_with_the_reason() -> None:
    stage = make_stage()
    with pytest.raises(PromptLengthError, match="the trace asks 300 input tokens: this model "
                       "takes 21 to 255 \\(context 256, count_as chat\\)"):  # fmt: skip
        built(stage, 0, {"input_tokens": 300, "output_tokens": 4})
    with pytest.raises(PromptLengthError, match="the trace asks 200 output tokens: this model "
                       "takes 1 to 56"):  # fmt: skip
        built(stage, 0, {"input_tokens": 200, "output_tokens": 200})


class RememberPayload(Stage[StageConfig]):
    """Keeps every payload it sees (the trace test's probe)."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def run(self, query: Query) -> Route:
        RememberPayload.seen.append(query.payload)
        return None


def test_a_replayed_trace_shapes_the_prompts(tmp_path: Path) -> None:
    records = [
        {"timestamp": 0, "input_length": 50, "output_length": 5, "hash_ids": [0]},
        {"timestamp": 10, "input_length": 128, "output_length": 16, "hash_ids": [0, 1]},
        {"timestamp": 20, "input_length": 231, "output_length": 25, "hash_ids": [2]},
    ]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(record) + "\n" for record in records))
    registry = registry_with(
        {"dataset.synthetic_prompts": SyntheticPromptsStage, "test.remember": RememberPayload}
    )
    spec = PipelineSpec.model_validate(
        {"name": "p", "error_budget": None,
         "loadgen": {"type": "trace", "trace": str(trace), "trace_format": "mooncake",
                     "duration_s": 5, "timeout_s": 20},
         "stages": [{"id": "prompts", "type": "dataset.synthetic_prompts", "outputs": ["seen"]},
                    {"id": "seen", "type": "test.remember"}]}
    )  # fmt: skip
    RememberPayload.seen.clear()
    runtime, _ = run_in_process(spec, registry)
    assert runtime.error_rows() == []
    seen = sorted(RememberPayload.seen, key=lambda payload: payload["prompt_id"])
    shapes = [(p["input_tokens"], p["output_tokens"], p["hash_ids"]) for p in seen]
    assert shapes == [(r["input_length"], r["output_length"], r["hash_ids"]) for r in records]
    counter = make_stage().builder.count
    assert [counter(payload["prompt"]) for payload in seen] == [50, 128, 231]


def test_replicas_build_the_same_prompt_for_a_query() -> None:
    from stages.runtime.pipeline import REPLICA_SEED_STRIDE

    # The runtime offsets a replica's seed; the prompt of a query stays the same.
    replica = make_stage(3 + 2 * REPLICA_SEED_STRIDE, replica=2)
    assert built(replica, 9) == built(make_stage(3), 9)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"tokenizer": "gpt2"}, "unknown tokenizer 'gpt2'"),
        ({"input_tokens": 0}, None),
        (
            {"input_tokens": {"distribution": "uniform", "low": 9, "high": 3}},
            "high 3 is below low 9",
        ),
        (
            {"input_tokens": {"distribution": "empirical", "values": [5, 6], "weights": [1]}},
            "1 weights for 2 values",
        ),
        ({"input_tokens": {"distribution": "empirical", "values": [0]}}, "must be >= 1"),
        ({"input_tokens": {"distribution": "zipf", "mean": 3}}, "does not match any of the"),
        ({"output_tokens": {"distribution": "normal", "mean": 3}}, "std"),
        ({"count_as": "messages"}, "'text', 'completions' or 'chat'"),
    ],
)
def test_a_bad_config_is_refused_with_its_reason(
    config: dict[str, Any], reason: str | None
) -> None:
    if reason is None:  # a bare number below 1 is refused once drawn: clipped up to the floor
        assert built(make_stage(**config), 0)["input_tokens"] == make_stage().builder.min_tokens
        return
    with pytest.raises(ValidationError, match=reason):
        SyntheticPromptsConfig.model_validate(config)


# --------------------------------------------------------------------------- http.openai


def shaped_query(
    input_tokens: int = 128, output_tokens: int = 9, counted_as: str = "chat"
) -> Query:
    payload = {"prompt": "in fix", "input_tokens": input_tokens, "counted_as": counted_as,
               "output_tokens": output_tokens}  # fmt: skip
    return make_query(payload=payload)


@pytest.mark.parametrize(
    ("enforce", "extra"),
    [
        ("off", {}),
        ("min_tokens", {"min_tokens": 9, "ignore_eos": True}),
        (
            "generation_config",
            {"generation_config": json.dumps({"max_new_tokens": 9, "min_new_tokens": 9})},
        ),
    ],
)
def test_the_payloads_output_length_is_asked_for(enforce: str, extra: dict[str, Any]) -> None:
    with ThreadedStub(Script(tokens=9, prompt_tokens=128)) as stub:
        stage = make_http_stage(base_url=stub.url, api="chat", max_tokens=4, enforce_output=enforce)
        query = shaped_query()
        stage.run(query)
        body = stub.stats.bodies[0]
    assert body["max_tokens"] == 9 and body["stream_options"] == {"include_usage": True}
    assert {key: body[key] for key in extra} == extra
    assert not set(body) & ({"min_tokens", "ignore_eos", "generation_config"} - set(extra))
    assert (query.prompt_tokens, query.tokens) == (128, 9)


@pytest.mark.parametrize(
    ("script", "enforce", "reason"),
    [
        (
            Script(tokens=9, prompt_tokens=131),
            "off",
            "asked 128 input tokens, the server counted 131",
        ),
        (Script(tokens=5, prompt_tokens=128), "generation_config", "asked 9 output tokens, got 5"),
        (Script(tokens=9), "off", "asked 128 input tokens, the server reported no prompt_tokens"),
    ],
)
def test_a_request_that_arrives_otherwise_than_asked_fails_with_the_difference(
    script: Script, enforce: str, reason: str
) -> None:
    with ThreadedStub(script) as stub:
        stage = make_http_stage(base_url=stub.url, api="chat", enforce_output=enforce)
        query = shaped_query()
        with pytest.raises(RuntimeError, match=reason):
            stage.run(query)
        assert query.tokens == script.tokens  # the row keeps what the server said
        recorded = make_http_stage(
            base_url=stub.url, api="chat", enforce_output=enforce, on_token_mismatch="record"
        )
        recorded.run(shaped_query())


UNCHECKED_CHAT = (
    "input_tokens counted as chat, not as api completions counts them: not checked against "
    "the server's prompt_tokens"
)


def test_an_output_length_not_enforced_may_stop_early_and_counts_apply_per_api() -> None:
    warned: list[str] = []
    with ThreadedStub(Script(tokens=3, prompt_tokens=140)) as stub:
        # counted for chat: a completions request cannot compare it, and warns (not silent)
        make_http_stage(base_url=stub.url, api="completions", warnings=warned).run(shaped_query())
        assert warned == [UNCHECKED_CHAT]
        stage = make_http_stage(base_url=stub.url, api="completions", warnings=warned)
        with pytest.raises(RuntimeError, match="asked 139 input tokens, the server counted 140"):
            stage.run(shaped_query(140 - 1, counted_as="completions"))
        assert warned == [UNCHECKED_CHAT]  # counted for its api: checked, no warning
        untold = make_query(payload={"prompt": "in fix", "input_tokens": 3})
        make_http_stage(base_url=stub.url, api="chat", warnings=warned).run(untold)
    assert warned[1:] == [
        "input_tokens with no counted_as, not as api chat counts them: not checked against "
        "the server's prompt_tokens"
    ]


def test_enforce_output_refuses_min_tokens_beside_it() -> None:
    with pytest.raises(ValidationError, match="leave min_tokens and ignore_eos unset"):
        make_http_stage(base_url="http://x", enforce_output="min_tokens", min_tokens=3)


def test_a_pipeline_records_prompt_tokens_beside_tokens() -> None:
    registry = registry_with(
        {"http.openai": OpenAIStage, "dataset.synthetic_prompts": SyntheticPromptsStage}
    )
    stages = [
        {"id": "prompts", "type": "dataset.synthetic_prompts", "outputs": ["llm"],
         "config": {"input_tokens": 64, "output_tokens": 5}},
        {"id": "llm", "type": "http.openai", "config": {}},
    ]  # fmt: skip
    with ThreadedStub(Script(tokens=5, prompt_tokens=64)) as stub:
        stages[1]["config"] = {"base_url": stub.url, "api": "chat", "enforce_output": "min_tokens"}
        spec = PipelineSpec.model_validate(
            {"name": "p", "error_budget": None, "stages": stages,
             "loadgen": {"type": "closed_loop", "concurrency": 2, "duration_s": 0,
                         "max_queries": 6, "min_queries": 6, "timeout_s": 30}}
        )  # fmt: skip
        runtime, recorder = run_in_process(spec, registry)
        bodies = stub.stats.bodies
    events = [e for e in rows(recorder, "stage_events") if e["stage"] == "llm"]
    assert [(e["status"], e["tokens"], e["prompt_tokens"]) for e in events] == [("ok", 5, 64)] * 6
    assert {
        e["prompt_tokens"] for e in rows(recorder, "stage_events") if e["stage"] == "prompts"
    } == {None}
    assert {(b["max_tokens"], b["min_tokens"]) for b in bodies} == {(5, 5)}
    assert runtime.error_rows() == []
    assert runtime.stage_warnings.records() == []  # every visit's count was checked


def test_a_count_the_sending_api_cannot_check_is_a_warning_of_the_run() -> None:
    """Built outside validation (which refuses it), prompts counted for chat sent over the
    completions API: every visit goes on, and the pipeline's warnings say how many were not
    checked, once (the launcher puts them in the manifest: tests/collocation)."""
    registry = registry_with(
        {"http.openai": OpenAIStage, "dataset.synthetic_prompts": SyntheticPromptsStage}
    )
    with ThreadedStub(Script(tokens=2, prompt_tokens=44)) as stub:
        stages = [
            {"id": "prompts", "type": "dataset.synthetic_prompts", "outputs": ["llm"],
             "config": {"input_tokens": 64, "output_tokens": 2, "count_as": "chat"}},
            {"id": "llm", "type": "http.openai",
             "config": {"base_url": stub.url, "api": "completions"}},
        ]  # fmt: skip
        spec = PipelineSpec.model_validate(
            {"name": "p", "error_budget": None, "stages": stages,
             "loadgen": {"type": "closed_loop", "concurrency": 2, "duration_s": 0,
                         "max_queries": 4, "min_queries": 4, "timeout_s": 30}}
        )  # fmt: skip
        runtime, recorder = run_in_process(spec, registry)
    events = [e for e in rows(recorder, "stage_events") if e["stage"] == "llm"]
    assert [(e["status"], e["prompt_tokens"]) for e in events] == [("ok", 44)] * 4
    assert runtime.stage_warnings.records() == [
        {"stage": "llm", "message": UNCHECKED_CHAT, "visits": 4}
    ]


def _common_words(first: str, second: str) -> int:
    """How many leading words two prompts share."""
    shared = 0
    for one, other in zip(first.split(), second.split(), strict=False):
        if one != other:
            break
        shared += 1
    return shared


def test_trace_hash_ids_become_shared_prefix_blocks() -> None:
    """Mooncake's prefix reuse kept: prompts naming the same leading hash ids start with the
    same blocks of text (so a prefix cache can reuse them), and still count exactly."""
    stage = make_stage(hash_block_tokens=16)
    one = built(stage, 0, {"input_tokens": 100, "hash_ids": [7, 8, 1], "output_tokens": 4})
    two = built(stage, 1, {"input_tokens": 90, "hash_ids": [7, 8, 2], "output_tokens": 4})
    three = built(stage, 2, {"input_tokens": 90, "hash_ids": [9], "output_tokens": 4})
    assert _common_words(one["prompt"], two["prompt"]) == 1 + 2 * 16  # the lead, blocks 7, 8
    assert _common_words(one["prompt"], three["prompt"]) == 1  # the lead word only
    for payload in (one, two, three):
        assert stage.builder.count(payload["prompt"]) == payload["input_tokens"]
    again = built(make_stage(hash_block_tokens=16), 5, {"input_tokens": 60, "hash_ids": [7]})
    assert _common_words(one["prompt"], again["prompt"]) >= 1 + 16  # same block, any query


def test_a_shared_prefix_pool_is_reused_at_the_asked_share() -> None:
    stage = make_stage(input_tokens=64, shared_prefixes={"count": 3, "tokens": 20, "share": 0.5})
    payloads = [built(stage, query_id) for query_id in range(200)]
    with_prefix = [p for p in payloads if p["prefix_id"] is not None]
    assert 70 <= len(with_prefix) <= 130  # binomial(200, 0.5): far outside 4.2 sd
    assert {p["prefix_id"] for p in with_prefix} == {0, 1, 2}
    for first, second in itertools.pairwise(with_prefix):
        shared = _common_words(first["prompt"], second["prompt"])
        assert shared >= 21 if first["prefix_id"] == second["prefix_id"] else shared < 21
    assert all(stage.builder.count(p["prompt"]) == 64 for p in payloads)


def test_a_trace_longer_than_the_models_context_is_refused_before_the_run(
    tmp_path: Path,
) -> None:
    """The hostile trace: a request asking more tokens than tiny_lm's 256 stops the run at its
    start (exit 2 through the launcher's LaunchError) with the file and the row."""
    from stages.collocation.preflight import check_traces
    from stages.validation.loading import validate_document

    trace = tmp_path / "t.jsonl"
    rows_ = [(30, 4), (200, 20), (250, 20), (100, 100)]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": index, "input_length": i, "output_length": o}) + "\n"
            for index, (i, o) in enumerate(rows_)
        )
    )
    document: dict[str, Any] = {
        "name": "long",
        "services": [{"name": "llm", "type": "external", "url": "http://127.0.0.1:9"}],
        "pipelines": [
            {
                "name": "p",
                "loadgen": {"type": "trace", "trace": str(trace), "trace_format": "mooncake"},
                "stages": [
                    {"id": "prompts", "type": "dataset.synthetic_prompts", "outputs": ["llm"]},
                    {"id": "llm", "type": "http.openai", "config": {"service": "llm"}},
                ],
            }
        ],
    }
    (tmp_path / "spec.yaml").write_text("# the spec's folder holds the trace\n")
    spec = validate_document(document, str(tmp_path / "spec.yaml")).spec
    assert check_traces(spec) == [
        f"pipelines[0].loadgen.trace: {trace}: row 3: asks 270 tokens (input + output), beyond "
        "the model's context of 256"
    ]
    document["pipelines"][0]["stages"][0]["config"] = {"max_model_tokens": 200}
    spec = validate_document(document, str(tmp_path / "spec.yaml")).spec
    assert [problem.split(": ")[2] for problem in check_traces(spec)] == ["row 2", "row 3"]
