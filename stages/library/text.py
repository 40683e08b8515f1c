"""Text stages: `dataset.prompts`, `transformers.generate` and `transformers.embed`.

Models are named `tiny_lm` / `minilm` (artefacts built locally, see `stages.artifacts.text`) or
`hf:<org>/<name>` (a hub model: the local cache, else a download; a fast one-line error without
a network, see `stages.artifacts.hub`). torch and transformers are imported in `prepare()`.
Each stage lives in its own module (prompts, generate, embed; shared parts in text_payloads
and text_models); this module keeps the names the `collobench.stages` entry points in
pyproject.toml and earlier callers import from here.
"""

from __future__ import annotations

from stages.library.embed import EmbedConfig as EmbedConfig
from stages.library.embed import EmbedStage as EmbedStage
from stages.library.generate import GenerateConfig as GenerateConfig
from stages.library.generate import GenerateStage as GenerateStage
from stages.library.prompts import PromptsConfig as PromptsConfig
from stages.library.prompts import PromptsStage as PromptsStage
from stages.library.text_payloads import PROMPT_FIELD as PROMPT_FIELD
