"""Token lengths of synthetic requests (`dataset.synthetic_prompts`): a fixed number or a seeded
distribution (normal, lognormal, uniform, empirical), sampled per query from a generator seeded
by (stage seed, query id, which length), so a rerun draws the same lengths for the same query
ids whatever the arrival order. Samples are rounded to integers and clipped to [low, high]
(at least 1, at most what the model's context allows). Pure Python: no heavy imports.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Annotated, Literal

from pydantic import Field, model_validator

from stages.spec.base import StrictModel


class NormalLength(StrictModel):
    """A normal distribution of lengths."""

    distribution: Literal["normal"] = Field(description="normal: mean and std (tokens).")
    mean: float = Field(gt=0, description="Mean length in tokens.")
    std: float = Field(ge=0, description="Standard deviation in tokens.")


class LognormalLength(StrictModel):
    """A lognormal distribution of lengths, given by the lengths' own mean and std."""

    distribution: Literal["lognormal"] = Field(
        description="lognormal: the LENGTHS' mean and std (tokens), not those of their log."
    )
    mean: float = Field(gt=0, description="Mean length in tokens.")
    std: float = Field(ge=0, description="Standard deviation of the lengths in tokens.")


class UniformLength(StrictModel):
    """Whole lengths drawn uniformly from [low, high]."""

    distribution: Literal["uniform"] = Field(description="uniform: integers in [low, high].")
    low: int = Field(ge=1, description="Shortest length in tokens (inclusive).")
    high: int = Field(ge=1, description="Longest length in tokens (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high {self.high} is below low {self.low}")
        return self


class EmpiricalLength(StrictModel):
    """Lengths drawn from a list (e.g. measured from a production log), optionally weighted."""

    distribution: Literal["empirical"] = Field(
        description="empirical: draw from `values` (with `weights`, else equally)."
    )
    values: list[int] = Field(min_length=1, description="The lengths in tokens (each >= 1).")
    weights: list[float] | None = Field(
        None, description="Relative weights, one per value (>= 0, not all 0); null: equal."
    )

    @model_validator(mode="after")
    def _consistent(self) -> EmpiricalLength:
        if min(self.values) < 1:
            raise ValueError("values must be >= 1 token")
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"{len(self.weights)} weights for {len(self.values)} values: give one each"
                )
            if min(self.weights) < 0 or not sum(self.weights) > 0:
                raise ValueError("weights must be >= 0 and not all 0")
        return self


LengthDistribution = Annotated[
    NormalLength | LognormalLength | UniformLength | EmpiricalLength,
    Field(discriminator="distribution"),
]
TokenLength = int | LengthDistribution
"""What `input_tokens` / `output_tokens` take: a number of tokens or a distribution."""


def query_rng(seed: int, query_id: int, which: str) -> random.Random:
    """A generator depending on nothing but (seed, query id, which), so reruns repeat."""
    digest = hashlib.blake2b(f"{seed}:{query_id}:{which}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def _draw(length: TokenLength, rng: random.Random) -> float:
    if isinstance(length, int):
        return length
    if isinstance(length, NormalLength):
        return rng.gauss(length.mean, length.std)
    if isinstance(length, LognormalLength):
        sigma2 = math.log1p((length.std / length.mean) ** 2)
        return rng.lognormvariate(math.log(length.mean) - sigma2 / 2, math.sqrt(sigma2))
    if isinstance(length, UniformLength):
        return rng.randint(length.low, length.high)
    return rng.choices(length.values, weights=length.weights)[0]


def sample_length(length: TokenLength, rng: random.Random, low: int, high: int) -> int:
    """One length: drawn, rounded to an integer and clipped to [low, high] (low >= 1)."""
    low = max(1, low)
    return max(low, min(max(low, high), round(_draw(length, rng))))
