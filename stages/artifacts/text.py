"""Text artefacts: `prompts`, `rag_corpus`, `tiny_lm` and `minilm`."""

from __future__ import annotations

from stages.artifacts.store import ArtifactBuilder

BUILDERS: tuple[ArtifactBuilder, ...] = ()
