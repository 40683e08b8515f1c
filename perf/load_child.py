"""One whole-process load for perf/load_pairs.py: `python perf/load_child.py DB RUN_DIR...`.

Run by path with PYTHONPATH set to the tree whose code is measured (this checkout, or a
worktree of an earlier commit), so it imports only what every collobench since issue 22 has:
the loader's `load_runs` (analysis.warehouse.loader; analysis.loader before issue 43). Prints
one JSON object: the load's wall seconds, this process's CPU seconds (every thread), its peak
memory, and the per-step breakdown where the measured code has load_steps (null before it).
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _first_module(*names: str) -> Any:
    """The first of `names` that imports, else None: a module's place in the measured tree
    (analysis.warehouse.* since issue 43, analysis.* before)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def main() -> None:
    db, run_dirs = Path(sys.argv[1]), [Path(path) for path in sys.argv[2:]]
    load_runs = _first_module("analysis.warehouse.loader", "analysis.loader").load_runs

    keywords: dict[str, Any] = {}
    load_steps = _first_module("analysis.warehouse.load_steps", "analysis.load_steps")
    if load_steps is None:  # an earlier commit: no breakdown
        steps = None
    else:
        steps = load_steps.LoadSteps()
        keywords["steps"] = steps
    started, cpu = time.perf_counter(), time.process_time()
    load_runs(run_dirs, db, notify=lambda message: None, **keywords)
    print(
        json.dumps(
            {
                "load_s": round(time.perf_counter() - started, 3),
                "cpu_s": round(time.process_time() - cpu, 3),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "steps": steps.rounded() if steps is not None else None,
            }
        )
    )


if __name__ == "__main__":
    main()
