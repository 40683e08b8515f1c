"""One error model: every exception class of `stages`, `analysis` and `bench_defs` derives from
a category of `stages.contracts.errors.CollobenchError` (found by reading the source, so no
module has to be imported), and the CLI maps each category to its exit code and lines (that no
two classes share a name is tests/test_class_names.py)."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from stages.cli.errors import exit_for
from stages.contracts import errors
from stages.contracts.errors import CollobenchError, ExitCode

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("stages", "bench_defs", "analysis")
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
CATEGORIES = {
    name
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, CollobenchError)
}


def _classes() -> dict[str, list[tuple[str, list[str]]]]:
    """Class name -> (where, the names of its bases) for every class in the packages."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                    where = f"{path.relative_to(REPO)}:{node.lineno}"
                    found.setdefault(node.name, []).append((where, bases))
    return found


def _exception_classes() -> dict[str, list[tuple[str, list[str]]]]:
    """The classes that derive, through classes of ours, from a built-in exception."""
    classes = _classes()

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in BUILTIN_EXCEPTIONS or name in CATEGORIES:
            return True
        if name in seen or name not in classes:
            return False
        return any(
            is_exception(base, seen | {name}) for _, bases in classes[name] for base in bases
        )

    return {name: defs for name, defs in classes.items() if is_exception(name)}


def test_every_exception_class_has_a_category() -> None:
    found = _exception_classes()

    def categorised(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in CATEGORIES:
            return True
        if name in seen or name not in found:
            return False
        return all(
            any(categorised(base, seen | {name}) for base in bases) for _, bases in found[name]
        )

    assert len(found) > 30  # the walk sees the classes (a wrong REPO would pass vacuously)
    missing = sorted(
        defs[0][0] + " " + name for name, defs in found.items() if not categorised(name)
    )
    assert not missing, f"exception classes outside CollobenchError: {missing}"


@pytest.mark.parametrize(
    ("category", "code"),
    [
        (errors.InvalidInputError, ExitCode.INVALID_INPUT),
        (errors.DeviceBusyError, ExitCode.DEVICE_BUSY),
        (errors.RunInterruptedError, ExitCode.INTERRUPTED),
        (errors.RunFailedError, ExitCode.FAILED_RUN),
        (errors.WarehouseUnavailableError, ExitCode.INVALID_INPUT),
    ],
)
def test_the_cli_maps_each_category_to_its_exit_code(
    category: type[CollobenchError], code: ExitCode
) -> None:
    assert exit_for(category("one line")) == (code, ["one line"])


def test_the_launchers_errors_say_what_they_said() -> None:
    from stages.collocation.launcher import DeviceInUse, LaunchError

    assert exit_for(LaunchError("no such mode", "spec.yaml")) == (
        ExitCode.INVALID_INPUT,
        ["spec.yaml: no such mode"],
    )
    busy = DeviceInUse(["foreign compute process on the GPU: pid 1"], Path("runs/r"))
    assert exit_for(busy) == (
        ExitCode.DEVICE_BUSY,
        [
            "device_busy: foreign compute process on the GPU: pid 1",
            "refused before measuring; manifest in runs/r",
        ],
    )


def test_analysis_input_errors_are_invalid_input_and_bugs_are_not_mapped() -> None:
    from analysis.reports.report_entries import ReportCatalogueError
    from analysis.warehouse.db import WarehouseBusy

    assert exit_for(WarehouseBusy("busy")) == (ExitCode.INVALID_INPUT, ["busy"])
    assert exit_for(ReportCatalogueError("no view x")) == (ExitCode.INVALID_INPUT, ["no view x"])
    assert exit_for(ZeroDivisionError("a bug")) is None


def test_every_exit_code_has_a_meaning() -> None:
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 130]
    assert all(code.meaning for code in ExitCode)
