"""The architecture as a checked rule: which package may import which, and where torch may load.

The dependency direction: bench_defs -> analysis, stages; stages -> nothing of ours but
itself (the CLI, the one composition root, also meets analysis); analysis -> the leaf contracts only
(stages.rundir, the run-directory contract, and stages.contracts, the contracts both sides share;
neither imports anything else of ours); the runtime knows no concrete
stage. Torch loads only where a model runs: never at module level in the spec, runtime, library,
artefact or Dagster code, so validating a spec (and a Dagster code server) never pays for it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.helpers import REPO

LEAVES = ("stages.rundir", "stages.contracts")
"""The leaf contracts: what `analysis` may import of `stages`."""
OURS = ("stages", "analysis", "bench_defs")


class ImportRule(NamedTuple):
    """Modules under `package` may not import anything under `forbidden` except what is under
    `allowed` (dotted prefixes). docs/design.md's layering table states these rules, and
    tests/test_docs.py holds it to them."""

    package: str
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()


def _families(*names: str) -> tuple[str, ...]:
    """The stage library's families `names`, as dotted prefixes."""
    return tuple(f"stages.library.{name}" for name in names)


RULES: tuple[ImportRule, ...] = (
    ImportRule("stages", ("bench_defs", "dagster")),
    ImportRule(
        "stages/runtime", ("stages.library", "stages.collocation", "stages.cli", "analysis")
    ),
    ImportRule("stages/library", ("stages.collocation", "stages.cli", "analysis", "dagster")),
    # The stage families import only those below them: core, then models, then vision and
    # text, then served; retrieval and self_rag stand on core alone.
    ImportRule("stages/library/core", ("stages.library",), allowed=_families("core")),
    ImportRule("stages/library/models", ("stages.library",), allowed=_families("models", "core")),
    ImportRule(
        "stages/library/vision", ("stages.library",), allowed=_families("vision", "models", "core")
    ),
    ImportRule(
        "stages/library/text", ("stages.library",), allowed=_families("text", "models", "core")
    ),
    ImportRule(
        "stages/library/retrieval", ("stages.library",), allowed=_families("retrieval", "core")
    ),
    ImportRule(
        "stages/library/self_rag", ("stages.library",), allowed=_families("self_rag", "core")
    ),
    ImportRule(
        "stages/library/served",
        ("stages.library",),
        allowed=_families("served", "text", "models", "core"),
    ),
    ImportRule("stages/telemetry", ("stages.library", "stages.cli", "analysis", "dagster")),
    ImportRule("stages/artifacts", ("stages.library", "stages.cli", "analysis", "dagster")),
    # The spec's models sit below the runtime and the services, which import them; validating
    # a spec (the stage registry's checks) is stages/validation, above both.
    ImportRule(
        "stages/spec",
        (
            "stages.runtime",
            "stages.services",
            "stages.validation",
            "stages.library",
            "stages.collocation",
            "stages.cli",
            "analysis",
        ),
    ),
    ImportRule(
        "stages/validation", ("stages.library", "stages.collocation", "stages.cli", "analysis")
    ),
    ImportRule(
        "stages/collocation_modes",
        ("stages.collocation", "stages.library", "stages.services", "stages.cli", "analysis"),
    ),
    ImportRule("stages/collocation", ("stages.cli", "analysis", "dagster")),
    ImportRule("stages/capacity", ("stages.cli", "analysis", "dagster")),
    ImportRule(
        "stages/services",
        ("stages.library", "stages.collocation", "stages.cli", "analysis", "dagster"),
    ),
    # The leaves: what analysis may import must not pull the rest of stages in behind it; the
    # run directory may use the shared contracts, the contracts nothing of ours.
    ImportRule("stages/rundir", OURS, allowed=LEAVES),
    ImportRule("stages/contracts", OURS, allowed=("stages.contracts",)),
    # The A/B statistics are pure functions of block differences: the runner, CLI and warehouse
    # import them, never the other way round. The session runner above them drives the arms'
    # processes; their figures come in through the leaf contract (stages.contracts.ab_segment).
    ImportRule("stages/ab/stats", OURS, allowed=("stages.ab.stats", "stages.contracts")),
    ImportRule("stages/ab", ("stages.cli", "stages.collocation", "analysis", "dagster")),
    ImportRule("analysis", ("stages", "bench_defs", "dagster"), allowed=LEAVES),
    # What every Dagster family shares sits below them all (no cycle through the code location).
    ImportRule("bench_defs/core", ("bench_defs",), allowed=("bench_defs.core",)),
)
"""The layering, one rule per package."""
HEAVY = ("torch", "torchvision", "transformers", "sklearn", "tokenizers", "safetensors")


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _imports(path: Path, module_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _offenders(
    package: str,
    forbidden: tuple[str, ...],
    module_level_only: bool = False,
    allowed: tuple[str, ...] = (),
) -> list[str]:
    """Imports in `package` of anything under `forbidden` that is not under `allowed`."""
    found = []
    for path in _modules(package):
        for name in _imports(path, module_level_only):
            if _within(name, forbidden) and not _within(name, allowed):
                found.append(f"{path.relative_to(REPO)} imports {name}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=[rule.package for rule in RULES])
def test_packages_import_only_what_the_layering_allows(rule: ImportRule) -> None:
    assert _offenders(rule.package, rule.forbidden, allowed=rule.allowed) == []


@pytest.mark.parametrize(
    "package",
    [
        "stages/spec",
        "stages/validation",
        "stages/runtime",
        "stages/library",
        "stages/artifacts",
        "stages/services",
        "bench_defs",
    ],
)
def test_no_heavy_import_at_module_level(package: str) -> None:
    assert _offenders(package, HEAVY, module_level_only=True) == []


@pytest.mark.spawns
def test_validating_and_registering_every_stage_loads_no_torch() -> None:
    """The registry loads every stage class through its entry point; none may pull in torch."""
    code = (
        "import sys\n"
        "from stages.runtime.registry import default_registry\n"
        "from stages.validation.schema import spec_json_schema\n"
        "from stages.artifacts import registry\n"
        "names = default_registry().names()\n"
        "spec_json_schema()\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(len(names), heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    count, heavy = result.stdout.strip().split(" ", 1)
    assert int(count) >= 6 and heavy == "[]", result.stdout


@pytest.mark.spawns
def test_dagster_definitions_load_without_torch() -> None:
    """The code location (imported by the code server, the run worker and every step) never
    loads torch and friends: they load in the Pipes child's workers, and in the steps that
    build artefacts."""
    code = (
        "import sys\n"
        "from bench_defs.definitions import defs\n"
        "repository = defs.get_repository_def()\n"
        "repository.asset_graph\n"
        "repository.get_all_jobs()\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
