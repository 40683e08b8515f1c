"""The stage library: the stage types this distribution ships.

Each is listed in pyproject.toml under `[project.entry-points."collobench.stages"]`, the same
door third-party stages use, so the runtime imports none of them by name. Modules here must not
import torch or transformers at module level: specs are validated (and Dagster code servers
import definitions) without paying for them. Heavy imports go in `prepare`.
"""
