"""The stage library: the stage types this distribution ships, one subpackage per family.

Each is listed in pyproject.toml under `[project.entry-points."collobench.stages"]`, the same
door third-party stages use, so the runtime imports none of them by name. The families import
only those below them: core (builtin stages, what model stages share), then models (model files
a user brings), then vision and text, then served; retrieval and self_rag use core alone.
Modules here must not import torch or transformers at module level: specs are validated (and
Dagster code servers import definitions) without paying for them. Heavy imports go in `prepare`.
"""
