"""`transformers.generate`: text generation with a causal LM by a manual decode loop with the
KV cache, timing the first token and counting new tokens.

torch and transformers are imported in `prepare()`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from stages.library.core.profiling import OperatorProfiler
from stages.library.core.torch_common import ModelStageConfig, device_synchronizer
from stages.library.text.language_models import load_text_model, model_reference, to_device
from stages.library.text.payloads import PROMPT_FIELD, as_dict, prompt_texts
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage
from stages.spec.model_entry import ModelEntry


def _query_seed(seed: int, query: Query, visit: int) -> int:
    """A seed for one query visit that depends on nothing but (stage seed, query id, visit), so
    sampling repeats on a rerun whatever the arrival order or thread timing."""
    digest = hashlib.blake2b(f"{seed}:{query.query_id}:{visit}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


class GenerateConfig(ModelStageConfig):
    model_entry_fields: ClassVar[tuple[str, ...]] = ("model",)
    model: Annotated[str | ModelEntry, model_reference("tiny_lm")] = Field(
        "tiny_lm",
        description="`tiny_lm` (built locally, seeded weights), `hf:<org>/<name>` (a hub "
        "causal LM: the local cache, else a download) or a model entry `{path: DIR}` (a local "
        "Hugging Face causal LM folder with its tokenizer, loaded offline).",
    )
    model_params: dict[str, int] = Field(
        default_factory=dict,
        description="tiny_lm recipe parameters (seed, n_layer, n_embd, n_head, n_positions, "
        "vocab_size, prompts_size, prompts_seed); not for hub models or model entries.",
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

    @model_validator(mode="after")
    def _consistent(self) -> GenerateConfig:
        if self.sampling == "greedy" and (self.temperature != 1.0 or self.top_k):
            raise ValueError("temperature and top_k need sampling: sample")
        if isinstance(self.model, ModelEntry):
            if self.model_params:
                raise ValueError("model_params are tiny_lm recipe parameters, not for a folder")
            return self
        if self.model.startswith("hf:") and self.model_params:
            raise ValueError("model_params are tiny_lm recipe parameters, not for hub models")
        if self.model == "tiny_lm":
            from stages.artifacts.text_artifacts import TinyLmParams

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
        model, tokenizer, self.model_label = load_text_model(
            config.model, "causal_lm", dict(config.model_params)
        )
        if tokenizer.pad_token_id is None:  # many hub LMs have no pad token: pad with EOS
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        tokenizer.truncation_side = "left"
        self.tokenizer = tokenizer
        self.model = to_device(model, device, config.dtype, config.threads)
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

    def run(self, query: Query) -> Route:
        torch = self.torch
        payload = as_dict(query.payload, self.config.text_field)
        texts, batched = prompt_texts(payload, self.config.text_field, self.config.use_documents)
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
