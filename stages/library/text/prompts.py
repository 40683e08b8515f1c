"""`dataset.prompts`: serves prompts of the seeded `prompts` artefact, one query (or batch) at a
time, the same prompt to the same query id on every rerun."""

from __future__ import annotations

from pydantic import Field, model_validator

from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig


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

        from stages.artifacts.registry import ensure_artifact
        from stages.artifacts.text_artifacts import read_prompts

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
