"""pyarrow without its pandas import: the first array pyarrow builds from Python objects
imports pandas (0.4-1 s, to ask whether they are pandas objects). The processes of a run
(workers, samplers, the CLI's launcher) hand it lists and numpy arrays only, so they let that one
check find no pandas; pyarrow imports pandas itself when asked for pandas output
(`to_pandas`), as it does where pandas is absent."""

from __future__ import annotations

import sys
import threading
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _NoPandasHere(MetaPathFinder):
    """Refuses `import pandas` to one thread, while pyarrow makes its one check."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas" and threading.get_ident() == self._thread:
            raise ImportError("pandas skipped by pyarrow's first array (stages.rundir)")
        return None


def skip_pandas_check() -> None:
    """Let pyarrow's one pandas check find none (nothing when pandas is imported already)."""
    if "pandas" in sys.modules:
        return
    import numpy  # noqa: F401  (without numpy loaded, pyarrow skips the check: it would come later)
    import pyarrow as pa

    finder = _NoPandasHere()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0], type=pa.int8())
    finally:
        sys.meta_path.remove(finder)
