"""Text stages: `dataset.prompts`, `transformers.generate` and `transformers.embed`.

Models are named `tiny_lm` / `minilm` (artefacts built locally, see `stages.artifacts.text`) or
`hf:<org>/<name>` (a hub model: the local cache, else a download; a fast one-line error without
a network, see `stages.artifacts.hub`). torch and transformers are imported in `prepare()`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from stages.artifacts.hub import check_hub_reference
from stages.library.profiling import OperatorProfiler
from stages.library.torch_common import ModelStageConfig, device_synchronizer
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig

PROMPT_FIELD = "prompt"


def _query_seed(seed: int, query: Query, visit: int) -> int:
    """A seed for one query visit that depends on nothing but (stage seed, query id, visit), so
    sampling repeats on a rerun whatever the arrival order or thread timing."""
    digest = hashlib.blake2b(f"{seed}:{query.query_id}:{visit}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


def _as_dict(payload: Any, field: str) -> dict[str, Any]:
    """A payload as a new dict holding `field`: a bare string becomes {field: text}; a join's
    payload ({input stage id: branch payload}) is merged, first branch first, with the
    branches' `documents` lists put together (a retrieval fork feeding one generator)."""
    if isinstance(payload, str) or (
        isinstance(payload, list) and all(isinstance(item, str) for item in payload)
    ):
        return {field: payload}
    if not isinstance(payload, dict):
        raise TypeError(f"expected a dict payload with '{field}', got {type(payload).__name__}")
    if field in payload:
        return dict(payload)
    branches = [value for value in payload.values() if isinstance(value, dict)]
    if branches and len(branches) == len(payload):
        merged: dict[str, Any] = {}
        documents: list[Any] = []
        for branch in branches:
            documents.extend(branch.get("documents") or [])
            for key, value in branch.items():
                merged.setdefault(key, value)
        if documents:
            merged["documents"] = documents
        if field in merged:
            return merged
    raise KeyError(f"payload has no '{field}' field (keys: {', '.join(map(str, payload))})")


# --------------------------------------------------------------------------- dataset.prompts


class PromptsConfig(StageConfig):
    size: int = Field(
        512, ge=1, le=1_000_000, description="Prompts in the `prompts` artefact served from."
    )
    dataset_seed: int = Field(0, description="Seed of the `prompts` artefact (its wording).")
    batch_size: int = Field(
        1,
        ge=1,
        description="Prompts per query. 1: `prompt` is a string; more: `prompt`, `prompt_id`, "
        "`topic` and `reference` are lists of that length.",
    )
    shuffle: bool = Field(
        True, description="Serve in an order seeded by the pipeline's seed (else prompt_id order)."
    )

    @model_validator(mode="after")
    def _batch_fits(self) -> PromptsConfig:
        if self.batch_size > self.size:
            raise ValueError(f"batch_size {self.batch_size} is larger than the {self.size} prompts")
        return self


class PromptsStage(Stage[PromptsConfig]):
    """Serves prompts. ONE QUERY = one prompt (or `batch_size` prompts): query id q takes the
    q-th batch of a seeded permutation, cycling, so a rerun serves the same prompt to the same
    query id. Payload out: dict with `prompt`, `prompt_id`, `topic`, `reference`."""

    def prepare(self) -> None:
        import random

        from stages.artifacts.catalog import ensure_artifact
        from stages.artifacts.text import read_prompts

        built = ensure_artifact(
            "prompts", {"size": self.config.size, "seed": self.config.dataset_seed}
        )
        columns = read_prompts(built.path)
        order = list(range(len(columns["prompt_id"])))
        if self.config.shuffle:
            random.Random(self.context.seed).shuffle(order)
        self._rows = [
            {
                "prompt": columns["text"][index],
                "prompt_id": columns["prompt_id"][index],
                "topic": columns["topic"][index],
                "reference": columns["reference"][index],
            }
            for index in order
        ]

    def run(self, query: Query) -> Route:
        rows, batch = self._rows, self.config.batch_size
        start = query.query_id * batch
        if batch == 1:
            query.payload = dict(rows[start % len(rows)])
            return None
        picked = [rows[(start + offset) % len(rows)] for offset in range(batch)]
        query.payload = {key: [row[key] for row in picked] for key in picked[0]}
        return None


# --------------------------------------------------------------------------- model loading


def _load_model(
    reference: str, task: Literal["causal_lm", "encoder"], params: dict[str, Any]
) -> tuple[Any, Any, str]:
    """(model, tokenizer, description) for `tiny_lm`, `minilm` or `hf:<name>`, in eval mode."""
    from stages.artifacts.catalog import ensure_artifact
    from stages.artifacts.hub import hub_name, load_hub_model

    name = hub_name(reference)
    if name is not None:
        model, tokenizer = load_hub_model(name, task)
        return model.eval(), tokenizer, f"hub:{name}"
    built = ensure_artifact(reference, params)
    if task == "encoder":
        from stages.artifacts.text import load_encoder

        model, tokenizer = load_encoder(built.path)
        return model, tokenizer, f"{reference}@{built.content_hash[:12]}"
    from stages.artifacts.hub import load_pretrained

    model, tokenizer = load_pretrained(built.path, "causal_lm", local_files_only=True)
    return model, tokenizer, f"{reference}@{built.content_hash[:12]}"


def _to_device(model: Any, device: str, dtype: str, threads: int | None) -> Any:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return model.to(device=device, dtype=getattr(torch, dtype))


# --------------------------------------------------------------------------- generate


class GenerateConfig(ModelStageConfig):
    model: str = Field(
        "tiny_lm",
        description="`tiny_lm` (built locally, seeded weights) or `hf:<org>/<name>` (a hub "
        "causal LM: the local cache, else a download).",
    )
    model_params: dict[str, int] = Field(
        default_factory=dict,
        description="tiny_lm recipe parameters (seed, n_layer, n_embd, n_head, n_positions, "
        "vocab_size, prompts_size, prompts_seed); not for hub models.",
    )
    max_new_tokens: int = Field(16, ge=1, le=8192, description="New tokens per sequence.")
    sampling: Literal["greedy", "sample"] = Field(
        "greedy",
        description="greedy: the most likely token; sample: seeded sampling per query (the "
        "seed comes from the pipeline seed, query id and visit, so reruns repeat).",
    )
    temperature: float = Field(1.0, gt=0, le=100, description="sample: softmax temperature.")
    top_k: int = Field(0, ge=0, description="sample: keep the k most likely tokens; 0 = all.")
    stop_at_eos: bool = Field(
        False,
        description="Stop a sequence at its end-of-sequence token. Off (the default), every "
        "query generates exactly max_new_tokens, so every query does the same work.",
    )
    max_prompt_tokens: int = Field(
        128, ge=1, description="Longer prompts keep their last tokens (truncated on the left)."
    )
    text_field: str = Field(PROMPT_FIELD, description="Payload field holding the prompt text.")
    use_documents: bool = Field(
        True,
        description="When the payload carries retrieved `documents` (retrieval.vector), put "
        "their texts before the prompt as context.",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value == "tiny_lm":
            return value
        if value.startswith("hf:"):
            check_hub_reference(value)
            return value
        raise ValueError(f"unknown model '{value}': use tiny_lm or hf:<org>/<name>")

    @model_validator(mode="after")
    def _consistent(self) -> GenerateConfig:
        if self.sampling == "greedy" and (self.temperature != 1.0 or self.top_k):
            raise ValueError("temperature and top_k need sampling: sample")
        if self.model.startswith("hf:") and self.model_params:
            raise ValueError("model_params are tiny_lm recipe parameters, not for hub models")
        if self.model == "tiny_lm":
            from stages.artifacts.text import TinyLmParams

            try:
                params = TinyLmParams.model_validate(self.model_params)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ValueError(
                    f"model_params{'.' + where if where else ''}: {first['msg']}"
                ) from None
            if self.max_prompt_tokens + self.max_new_tokens > params.n_positions:
                raise ValueError(
                    f"max_prompt_tokens {self.max_prompt_tokens} + max_new_tokens "
                    f"{self.max_new_tokens} exceed tiny_lm's context of {params.n_positions} "
                    "tokens (model_params.n_positions)"
                )
        return self


class GenerateStage(Stage[GenerateConfig]):
    """Generates text with a causal LM. ONE QUERY = one prompt (or the payload's list of
    prompts, as one batch) -> `max_new_tokens` new tokens each, by a manual decode loop with the
    KV cache: one prefill pass over the prompt, then one pass per token. `first_token_ns` is
    taken when token 1 exists (after the prefill, device synchronised); `tokens` = new tokens
    generated (all sequences of a batch together). Payload out: a new dict with the input's
    fields, `text` (the generated continuation; a list for a batch) and `new_tokens`."""

    records_outcome = True

    def prepare(self) -> None:
        import torch

        config, device = self.config, self.context.device
        model, tokenizer, self.model_label = _load_model(
            config.model, "causal_lm", dict(config.model_params)
        )
        if tokenizer.pad_token_id is None:  # many hub LMs have no pad token: pad with EOS
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        tokenizer.truncation_side = "left"
        self.tokenizer = tokenizer
        self.model = _to_device(model, device, config.dtype, config.threads)
        self.eos_id = tokenizer.eos_token_id
        self.torch = torch
        self.synchronize = device_synchronizer(device, torch)
        self.profiler = OperatorProfiler(config.profile_every, self.context)
        if config.compile:
            self.model = torch.compile(self.model, dynamic=True)
        # One generation before the barrier: compilation and the lazy first-call set-up
        # (cuBLAS handles, kernel loading) never land in a timed query.
        with torch.inference_mode():
            self._generate(["warm up"], None)
        self.synchronize()

    def _pick(self, logits: Any, generator: Any) -> Any:
        """Next token ids [batch] from last-position logits [batch, vocab]."""
        torch, config = self.torch, self.config
        if config.sampling == "greedy":
            return logits.argmax(dim=-1)
        scores = logits.float() / config.temperature
        if config.top_k and config.top_k < scores.shape[-1]:
            kth = torch.topk(scores, config.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probabilities = torch.softmax(scores, dim=-1)
        return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)

    def _generate(self, prompts: Sequence[str], generator: Any) -> tuple[Any, int | None, int]:
        """(new token ids [batch, steps], first-token time, new tokens counted)."""
        torch, config, device = self.torch, self.config, self.context.device
        encoded = self.tokenizer(
            list(prompts),
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=config.max_prompt_tokens,
        ).to(device)
        mask = encoded["attention_mask"]
        # Left padding: positions count real tokens only, so a padded row matches an unpadded one.
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
        output = self.model(
            input_ids=encoded["input_ids"],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
        )
        token = self._pick(output.logits[:, -1, :], generator)
        self.synchronize()
        first_token_ns = time.monotonic_ns()
        steps = [token]
        done = token == self.eos_id if config.stop_at_eos else None
        position = positions[:, -1:]
        past = output.past_key_values
        ones = torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=mask.device)
        for _ in range(config.max_new_tokens - 1):
            if done is not None and bool(done.all()):
                break
            mask = torch.cat([mask, ones], dim=-1)
            position = position + 1
            output = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=position,
                past_key_values=past,
                use_cache=True,
            )
            past = output.past_key_values
            token = self._pick(output.logits[:, -1, :], generator)
            if done is not None:
                token = token.masked_fill(done, self.eos_id)  # a finished row only pads
                done = done | (token == self.eos_id)
            steps.append(token)
        generated = torch.stack(steps, dim=1)
        if config.stop_at_eos:  # count up to and including each row's first EOS
            is_eos = generated == self.eos_id
            first_eos = torch.where(
                is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, generated.shape[1]
            )
            counted = int(first_eos.sum())
        else:
            counted = generated.numel()
        return generated, first_token_ns, counted

    def _prompt_texts(self, payload: dict[str, Any]) -> tuple[list[str], bool]:
        texts = payload[self.config.text_field]
        batched = isinstance(texts, list)
        texts = list(texts) if batched else [str(texts)]
        documents = payload.get("documents") if self.config.use_documents else None
        if documents:
            context = " ".join(_document_text(doc) for doc in documents)
            texts = [f"Context: {context}\nQuestion: {text}\nAnswer:" for text in texts]
        return texts, batched

    def run(self, query: Query) -> Route:
        torch = self.torch
        payload = _as_dict(query.payload, self.config.text_field)
        texts, batched = self._prompt_texts(payload)
        generator = None
        if self.config.sampling == "sample":
            generator = torch.Generator(device=self.context.device)
            generator.manual_seed(
                _query_seed(self.context.seed, query, query.visits[self.context.stage_index])
            )
        with torch.inference_mode(), self.profiler.around(query):
            generated, first_token_ns, counted = self._generate(texts, generator)
        decoded = self.tokenizer.batch_decode(generated.cpu(), skip_special_tokens=True)
        self.synchronize()
        query.first_token_ns = first_token_ns
        query.tokens = counted
        payload["text"] = decoded if batched else decoded[0]
        payload["new_tokens"] = counted
        query.payload = payload
        return None


def _document_text(document: Any) -> str:
    """The text of one retrieved document: a dict with `text`, a (doc_id, score, text) tuple,
    or a string."""
    if isinstance(document, dict):
        return str(document.get("text", ""))
    if isinstance(document, list | tuple) and document:
        return str(document[-1])
    return str(document)


# --------------------------------------------------------------------------- embed


class EmbedConfig(ModelStageConfig):
    model: str = Field(
        "minilm",
        description="`minilm` (all-MiniLM-L6-v2 from its PyPI package) or `hf:<org>/<name>` (a "
        "hub encoder, mean-pooled the same way).",
    )
    text_field: str = Field(PROMPT_FIELD, description="Payload field holding the text(s).")
    max_tokens: int = Field(
        256, ge=1, le=8192, description="Longer texts are truncated (all-MiniLM-L6-v2 saw 256)."
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value == "minilm":
            return value
        if value.startswith("hf:"):
            check_hub_reference(value)
            return value
        raise ValueError(f"unknown embedding model '{value}': use minilm or hf:<org>/<name>")


class EmbedStage(Stage[EmbedConfig]):
    """Embeds text as sentence-transformers does for all-MiniLM-L6-v2. ONE QUERY = the
    payload's text (or list of texts, as one batch) -> mean-pooled, L2-normalised vectors.
    Payload out: a new dict with the input's fields and `embedding` (numpy float32 [dim] for one
    text, [batch, dim] for a list)."""

    def prepare(self) -> None:
        import torch

        config, device = self.config, self.context.device
        model, self.tokenizer, self.model_label = _load_model(config.model, "encoder", {})
        self.model = _to_device(model, device, config.dtype, config.threads)
        if config.compile:
            self.model = torch.compile(self.model, dynamic=True)
        self.torch = torch
        self.synchronize = device_synchronizer(device, torch)
        self.profiler = OperatorProfiler(config.profile_every, self.context)
        # One call before the barrier (see GenerateStage.prepare).
        with torch.inference_mode():
            self._embed(["warm up"])
        self.synchronize()

    def _embed(self, texts: list[str]) -> Any:
        from stages.artifacts.text import embed_texts

        return embed_texts(
            self.model, self.tokenizer, texts, self.config.max_tokens, self.context.device
        )

    def run(self, query: Query) -> Route:
        payload = _as_dict(query.payload, self.config.text_field)
        texts = payload[self.config.text_field]
        batched = isinstance(texts, list)
        with self.torch.inference_mode(), self.profiler.around(query):
            vectors = self._embed(list(texts) if batched else [str(texts)])
        matrix = vectors.cpu().numpy()  # waits for the device: the copy needs the result
        self.synchronize()
        payload["embedding"] = matrix if batched else matrix[0]
        query.payload = payload
        return None
