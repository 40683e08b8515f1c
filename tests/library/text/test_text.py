"""Text stages: prompts order, generation timings in stage_events, embeddings, validation."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import run_query
from stages.library.text.embed import EmbedConfig, EmbedStage
from stages.library.text.generate import GenerateConfig, GenerateStage
from stages.library.text.payloads import as_dict as _as_dict
from stages.library.text.prompts import PromptsConfig, PromptsStage
from stages.rundir.tables import merge_parts
from stages.runtime.driver import run_pipeline
from stages.runtime.query import Query
from stages.runtime.registry import default_registry
from stages.runtime.stage import StageContext
from stages.spec.models import PipelineSpec
from tests.helpers import REPO

SMALL_LM = {"prompts_size": 64, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 400}


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One COLLOBENCH_HOME for the module, so the models are built (or copied) once."""
    return tmp_path_factory.mktemp("text-home")


@pytest.fixture
def home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLLOBENCH_HOME", str(shared_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # everything here is local
    return shared_home


def context(stage_index: int = 1, seed: int = 0) -> StageContext:
    return StageContext(stage_id="s", stage_index=stage_index, seed=seed)


def query(query_id: int, payload: Any = None, stages: int = 2) -> Query:
    record = Query(query_id, 0, stage_count=stages)
    record.payload = payload
    return record


@pytest.mark.spawns
def test_text_stage_types_are_registered_without_importing_torch() -> None:
    script = (
        "import sys\nfrom stages.runtime.registry import default_registry\n"
        "names = default_registry().names()\n"
        "print(all(n in names for n in ('dataset.prompts', 'transformers.generate', "
        "'transformers.embed')), 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert completed.stdout.split() == ["True", "False", "False"]
    assert default_registry().get("transformers.generate") is GenerateStage


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model": "gpt2"}, "unknown model 'gpt2'"),
        ({"model": "hf:a/b/c"}, "bad hub model name"),
        ({"temperature": 0.5}, "temperature and top_k need sampling: sample"),
        ({"max_new_tokens": 200}, "exceed tiny_lm's context of 256 tokens"),
        ({"model_params": {"n_head": 5}}, "n_head 5 must divide n_embd 192"),
        ({"model": "hf:gpt2", "model_params": {"seed": 1}}, "not for hub models"),
        ({"top_k": 5, "sampling": "sample", "extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_generate_config_errors(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GenerateConfig.model_validate(config)


@pytest.mark.spawns
def test_config_errors_are_one_line_in_collobench_validate(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "name: bad\npipelines:\n  - name: p\n    loadgen: {type: offline, samples_per_query: 4}\n"
        "    stages:\n      - {id: prompts, type: dataset.prompts, config: {size: 8, "
        "batch_size: 9}, outputs: [embed]}\n"
        "      - {id: embed, type: transformers.embed, config: {model: tiny_lm}}\n"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "validate", str(spec)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) >= 1 and all(
        line.startswith(f"{spec}: pipelines[0].stages[") for line in lines
    )
    assert "batch_size 9 is larger than the 8 prompts" in completed.stderr
    assert "Traceback" not in completed.stderr


# --------------------------------------------------------------------------- dataset.prompts


def test_prompts_are_served_in_a_seeded_order(home: Path) -> None:
    def served(seed: int, ids: range, **options: Any) -> list[Any]:
        stage = PromptsStage(PromptsConfig(size=24, **options), context(0, seed))
        stage.prepare()
        out = []
        for query_id in ids:
            record = query(query_id)
            stage.run(record)
            out.append(record.payload)
        return out

    first = served(1, range(24))
    assert sorted(p["prompt_id"] for p in first) == list(range(24))  # a permutation
    assert [p["prompt_id"] for p in served(1, range(24, 30))] == [
        p["prompt_id"] for p in first[:6]
    ]  # cycling: query 24 gets query 0's prompt
    assert served(1, range(24)) == first  # a rerun serves the same prompts to the same ids
    assert [p["prompt_id"] for p in served(2, range(24))] != [p["prompt_id"] for p in first]
    assert [p["prompt_id"] for p in served(1, range(3), shuffle=False)] == [0, 1, 2]
    assert set(first[0]) == {"prompt", "prompt_id", "topic", "reference"}
    (batch,) = served(1, range(1), batch_size=4)
    assert len(batch["prompt"]) == 4 and batch["prompt_id"] == [p["prompt_id"] for p in first[:4]]


# --------------------------------------------------------------------------- generate


def generator_stage(**options: Any) -> GenerateStage:
    config = GenerateConfig.model_validate({"model_params": SMALL_LM, "threads": 1, **options})
    stage = GenerateStage(config, context(1, seed=5))
    stage.prepare()
    return stage


def test_greedy_generation_counts_new_tokens(home: Path) -> None:
    stage = generator_stage(max_new_tokens=6)
    payload = {"prompt": "How does batching affect tail latency?", "prompt_id": 3}
    record = query(0, payload)
    stage.run(record)
    assert record.tokens == 6 and record.first_token_ns is not None
    out = record.payload
    assert out is not payload and payload.keys() == {"prompt", "prompt_id"}  # not mutated
    assert out["prompt_id"] == 3 and isinstance(out["text"], str) and out["new_tokens"] == 6
    again = query(1, dict(payload))
    stage.run(again)
    assert again.payload["text"] == out["text"]  # greedy is deterministic

    batch = query(2, {"prompt": ["a short one", "a much longer prompt about kv cache"]})
    stage.run(batch)
    assert batch.tokens == 12 and len(batch.payload["text"]) == 2


def test_a_padded_row_generates_what_it_generates_alone(home: Path) -> None:
    stage = generator_stage(max_new_tokens=5)
    long, short = "Explain why padding matters for throughput in serving.", "Why?"
    alone = query(0, {"prompt": short})
    stage.run(alone)
    together = query(1, {"prompt": [long, short]})
    stage.run(together)
    assert together.payload["text"][1] == alone.payload["text"]


def test_sampling_is_seeded_per_query(home: Path) -> None:
    stage = generator_stage(max_new_tokens=8, sampling="sample", temperature=1.5, top_k=50)
    texts: dict[int, list[str]] = {}
    for query_id in (0, 1, 0):
        record = query(query_id, {"prompt": "What is the effect of int8 weights on accuracy?"})
        stage.run(record)
        texts.setdefault(query_id, []).append(record.payload["text"])
    assert texts[0][0] == texts[0][1]  # same query id and visit: same sample
    assert texts[0][0] != texts[1][0]


def test_stop_at_eos_counts_up_to_the_end_token(home: Path) -> None:
    stage = generator_stage(max_new_tokens=6)
    probe = query(0, {"prompt": "How does MPS affect fairness?"})
    stage.run(probe)
    first_token = stage.tokenizer(probe.payload["text"])["input_ids"][0]
    # Make the greedy first token the end token: the sequence stops after one token.
    stopping = generator_stage(max_new_tokens=6, stop_at_eos=True)
    stopping.eos_id = first_token
    record = query(1, {"prompt": "How does MPS affect fairness?"})
    stopping.run(record)
    assert record.tokens == 1


def test_generation_uses_retrieved_documents(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stage = generator_stage(max_new_tokens=2)
    seen: list[list[str]] = []
    original = stage._generate

    def recording(prompts: Sequence[str], generator: Any) -> tuple[Any, int | None, int]:
        seen.append(list(prompts))
        return original(prompts, generator)

    monkeypatch.setattr(stage, "_generate", recording)
    joined = {
        "vector": {"prompt": "q?", "prompt_id": 1, "documents": [{"doc_id": 4, "text": "doc A"}]},
        "sql": {"prompt": "q?", "prompt_id": 1, "documents": [(5, 0.5, "doc B")]},
    }
    stage.run(query(0, joined))
    assert seen == [["Context: doc A doc B\nQuestion: q?\nAnswer:"]]
    assert _as_dict("plain", "prompt") == {"prompt": "plain"}
    with pytest.raises(KeyError, match="no 'prompt' field"):
        _as_dict({"other": 1}, "prompt")


def test_synchronises_after_the_model_and_before_returning(home: Path) -> None:
    stage = generator_stage(max_new_tokens=3)
    order: list[str] = []
    model = stage.model

    def model_call(*args: Any, **kwargs: Any) -> Any:
        order.append("model")
        return model(*args, **kwargs)

    stage.model = model_call
    stage.synchronize = lambda: order.append("sync")
    stage.run(query(0, {"prompt": "hello"}))
    # Synchronised once after the prefill (first-token time), and last of all before returning.
    assert order == ["model", "sync", "model", "model", "sync"]


def test_generation_timings_reach_stage_events(home: Path, tmp_path: Path) -> None:
    pipeline = PipelineSpec.model_validate(
        {
            "name": "llm",
            "loadgen": {"type": "offline", "samples_per_query": 6, "timeout_s": 120},
            "stages": [
                {
                    "id": "prompts",
                    "type": "dataset.prompts",
                    "config": {"size": 16},
                    "outputs": ["generate"],
                },
                {
                    "id": "generate",
                    "type": "transformers.generate",
                    "config": {"model_params": SMALL_LM, "max_new_tokens": 5, "threads": 1},
                },
            ],
        }
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    keys = {"run_id": "r", "trial": 0, "phase": "solo", "pipeline": "llm"}
    result, _ = run_pipeline(pipeline, seed=0, run_dir=run_dir, keys=keys)
    assert result.status == "ok"
    merge_parts(run_dir)
    events = pq.read_table(run_dir / "stage_events.parquet").to_pylist()
    generated = [e for e in events if e["stage"] == "generate"]
    assert len(generated) == 6
    for event in generated:
        assert event["status"] == "ok"
        assert event["started_ns"] < event["first_token_ns"] < event["finished_ns"]
        assert event["tokens"] == 5
    assert all(e["tokens"] is None for e in events if e["stage"] == "prompts")
    # ... and through the warehouse into the tokens view.
    (run_dir / "manifest.json").write_text(
        json.dumps({"run_id": "r", "status": "ok", "spec": {"pipelines": [pipeline.model_dump()]}})
    )
    db = tmp_path / "w.duckdb"
    load_runs([run_dir], db)
    columns, rows = run_query(db, "SELECT * FROM tokens")
    (row,) = [dict(zip(columns, values, strict=True)) for values in rows]
    assert row["stage"] == "generate" and row["queries"] == 6 and row["tokens"] == 30
    assert row["ttft_p50_ms"] >= row["stage_ttft_p50_ms"] > 0
    assert row["tpot_p50_ms"] > 0 and row["tokens_per_s"] > 0


# --------------------------------------------------------------------------- embed


def test_embeddings_are_unit_vectors_and_similar_texts_are_closer(home: Path) -> None:
    stage = EmbedStage(EmbedConfig(threads=1), context())
    stage.prepare()
    texts = [
        "GPU memory bandwidth limits large batches.",
        "The bandwidth of device memory bounds the batch size on a GPU.",
        "My grandmother bakes apple pie on Sundays.",
    ]
    record = query(0, {"prompt": texts, "prompt_id": [0, 1, 2]})
    stage.run(record)
    matrix = record.payload["embedding"]
    assert matrix.shape == (3, 384) and matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    similarity = matrix @ matrix.T
    assert similarity[0, 1] > similarity[0, 2] + 0.3
    one = query(1, {"prompt": texts[0], "prompt_id": 0})
    stage.run(one)
    vector = one.payload["embedding"]
    assert vector.shape == (384,) and one.payload["prompt_id"] == 0
    assert np.allclose(vector, matrix[0], atol=1e-5)  # padding in a batch changes nothing


def test_embed_config_rejects_a_generator() -> None:
    with pytest.raises(ValidationError, match="unknown embedding model 'tiny_lm'"):
        EmbedConfig(model="tiny_lm")


def test_prepare_generates_once_before_the_barrier(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First-call set-up (kernel loading, cuBLAS handles) is paid in prepare, never in a query."""
    prompts: list[list[str]] = []
    original = GenerateStage._generate

    def counted(self: GenerateStage, texts: Sequence[str], generator: Any) -> Any:
        prompts.append(list(texts))
        return original(self, texts, generator)

    monkeypatch.setattr(GenerateStage, "_generate", counted)
    stage = generator_stage(max_new_tokens=2)
    assert prompts == [["warm up"]]
    record = query(0, {"prompt": "What does a KV cache hold?"})
    stage.run(record)
    assert len(prompts) == 2 and record.tokens == 2
