"""The stage library. Importing it registers every stage type it holds.

Modules here must not import torch or transformers at module level: specs are validated (and
Dagster code servers import definitions) without paying for them. Heavy imports go in `prepare`.
"""

from stages.library import builtin as builtin

__all__ = ["builtin"]
