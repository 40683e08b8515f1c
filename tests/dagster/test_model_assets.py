"""Model files a spec names as observable source assets (bench_defs/assets/model_files.py): found in
the specs folder when the definitions load, observed through `model_files_sensor`'s run
request, their data version the content sha256, and a changed file making stale exactly the
benchmark partitions whose spec uses it (Dagster's own staleness resolver)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from bench_defs.core.specs import SPEC_PARTITIONS
from bench_defs.definitions import build_definitions
from stages.artifacts.registry import ARTIFACTS
from tests.dagster.specs import tiny_spec, write_spec

BENCHMARK = dg.AssetKey("benchmark_run")


def byo_spec(model: dict[str, str], name: str = "byo") -> dict[str, Any]:
    """The tiny spec classifying digits with the model entry `model` (it validates without
    loading the model: only the file's existence and kind are checked)."""
    spec = tiny_spec(name)
    spec["pipelines"][0]["stages"] = [
        {"id": "data", "type": "dataset.digits", "config": {"split": "test"}, "outputs": ["model"]},
        {"id": "model", "type": "torchvision.classify", "config": {"model": model}},
    ]
    return spec


def observe_changed(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> str:
    """One tick of `model_files_sensor`; its run request (when any) executed as the daemon
    would launch it. Returns the new cursor."""
    sensor = defs.resolve_sensor_def("model_files_sensor")
    result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))
    assert isinstance(result, dg.SensorResult) and result.cursor is not None
    for request in result.run_requests or []:
        keys = list(request.asset_selection or [])
        job = defs.resolve_implicit_job_def_def_for_assets(keys)
        assert job is not None
        assert job.execute_in_process(instance=instance, asset_selection=keys).success
    return result.cursor


def resolver(defs: dg.Definitions, instance: dg.DagsterInstance) -> CachingStaleStatusResolver:
    """Dagster's staleness as the UI computes it, over the current event log."""
    return CachingStaleStatusResolver(
        instance, defs.resolve_asset_graph(), LoadingContextForTest(instance)
    )


@pytest.fixture
def ephemeral() -> dg.DagsterInstance:
    """An in-memory instance: its runs capture no logs, so they start no process (the
    `instance` fixture's compute logs tail files through a subprocess)."""
    return dg.DagsterInstance.ephemeral()


def test_no_model_entry_adds_nothing(resources: dict[str, Any], specs_dir: Path) -> None:
    write_spec(specs_dir, "tiny", tiny_spec())
    defs = build_definitions(resources)
    graph = defs.resolve_asset_graph()
    assert not [key for key in graph.get_all_asset_keys() if key.path[0] == "model_files"]
    assert graph.get(BENCHMARK).parent_keys == {dg.AssetKey(name) for name in ARTIFACTS.names()}
    with pytest.raises(dg.DagsterInvariantViolationError):
        defs.resolve_sensor_def("model_files_sensor")


def test_one_asset_per_distinct_file_with_path_format_and_specs(
    resources: dict[str, Any], specs_dir: Path, tmp_path: Path
) -> None:
    (specs_dir / "models").mkdir()
    (specs_dir / "models" / "m.onnx").write_bytes(b"onnx bytes")
    (specs_dir / "other").mkdir()
    (specs_dir / "other" / "m.onnx").write_bytes(b"other bytes")
    write_spec(specs_dir, "a", byo_spec({"onnx": "models/m.onnx"}, "a"))
    write_spec(specs_dir, "b", byo_spec({"onnx": str(specs_dir / "models" / "m.onnx")}, "b"))
    write_spec(specs_dir, "c", byo_spec({"onnx": "other/m.onnx"}, "c"))
    write_spec(specs_dir, "broken", "pipelines: [")  # not a spec: no asset, no failure
    defs = build_definitions(resources)
    graph = defs.resolve_asset_graph()
    files = sorted(key for key in graph.get_all_asset_keys() if key.path[0] == "model_files")
    suffix = hashlib.sha256(str((specs_dir / "other" / "m.onnx").resolve()).encode()).hexdigest()
    assert files == [
        dg.AssetKey(["model_files", "m_onnx"]),
        dg.AssetKey(["model_files", f"m_onnx_{suffix[:8]}"]),
    ]
    node = graph.get(files[0])
    assert node.group_name == "model_files" and node.is_observable
    assert node.metadata["path"] == dg.MetadataValue.path(str(specs_dir / "models" / "m.onnx"))
    assert node.metadata["format"] == "onnx"
    entry = "pipelines[0].stages[1].config.model"
    assert node.metadata["named_by"] == dg.MetadataValue.json(
        [{"spec": "a", "entry": entry}, {"spec": "b", "entry": entry}]
    )
    assert set(files) <= graph.get(BENCHMARK).parent_keys
    assert node.partitions_def == graph.get(BENCHMARK).partitions_def


def test_observation_records_the_content_hash_for_the_specs_that_use_it(
    resources: dict[str, Any], specs_dir: Path, ephemeral: dg.DagsterInstance
) -> None:
    model = specs_dir / "m.onnx"
    model.write_bytes(b"version 1")
    write_spec(specs_dir, "byo", byo_spec({"onnx": "m.onnx"}))
    write_spec(specs_dir, "tiny", tiny_spec())
    defs = build_definitions(resources)
    key = dg.AssetKey(["model_files", "m_onnx"])
    cursor = observe_changed(defs, ephemeral, None)  # first tick: every file
    versions = resolver(defs, ephemeral)
    assert (
        versions.get_current_data_version(key, "byo").value
        == hashlib.sha256(b"version 1").hexdigest()
    )
    assert versions.get_current_data_version(key, "tiny") == dg.DataVersion("INITIAL")

    again = defs.resolve_sensor_def("model_files_sensor")(
        dg.build_sensor_context(instance=ephemeral, cursor=cursor, definitions=defs)
    )
    assert isinstance(again, dg.SensorResult) and not again.run_requests  # unchanged: nothing
    model.write_bytes(b"version 2")
    observe_changed(defs, ephemeral, cursor)
    version = resolver(defs, ephemeral).get_current_data_version(key, "byo")
    assert version.value == hashlib.sha256(b"version 2").hexdigest()


def test_a_missing_file_is_named_by_the_sensor_and_fails_its_observation(
    resources: dict[str, Any], specs_dir: Path, ephemeral: dg.DagsterInstance
) -> None:
    model = specs_dir / "m.onnx"
    model.write_bytes(b"x")
    write_spec(specs_dir, "byo", byo_spec({"onnx": "m.onnx"}))
    defs = build_definitions(resources)
    model.unlink()
    sensor = defs.resolve_sensor_def("model_files_sensor")
    result = sensor(dg.build_sensor_context(instance=ephemeral, cursor=None, definitions=defs))
    assert isinstance(result, dg.SensorResult) and not result.run_requests
    assert result.skip_reason is not None
    assert result.skip_reason.skip_message == f"missing model files: {model}"
    assert json.loads(result.cursor or "") == {}  # asked again once it is back
    keys = [dg.AssetKey(["model_files", "m_onnx"])]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    assert job is not None
    run = job.execute_in_process(instance=ephemeral, asset_selection=keys, raise_on_error=False)
    failure = next(event for event in run.all_events if event.is_step_failure)
    error = str(failure.step_failure_data.error)
    assert f"{model}: no such model file or folder (named by specs/byo.yaml " in error


@pytest.mark.spawns
@pytest.mark.slow
def test_a_changed_model_file_makes_stale_only_the_partitions_that_use_it(
    resources: dict[str, Any], specs_dir: Path, instance: dg.DagsterInstance
) -> None:
    """Two benchmarks really run (Pipes children): `byo` classifying digits with a TorchScript
    file it names, `tiny` without one. New bytes in the file, observed by the sensor's run:
    `byo` is stale because of the model file, `tiny` stays fresh."""
    import torch

    model = specs_dir / "m.ts"
    network = torch.nn.Sequential(
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(1, 10)
    )
    torch.jit.script(network).save(str(model))
    write_spec(specs_dir, "byo", byo_spec({"torchscript": "m.ts"}))
    write_spec(specs_dir, "tiny", tiny_spec())
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["byo", "tiny"])
    defs = build_definitions(resources)
    key = dg.AssetKey(["model_files", "m_ts"])
    cursor = observe_changed(defs, instance, None)
    # as the definitions hold them: with the deps on the model files and the test's resources
    assets = [defs.resolve_assets_def(BENCHMARK), defs.resolve_assets_def(key)]
    for partition in ("byo", "tiny"):
        run = dg.materialize(
            assets,
            partition_key=partition,
            instance=instance,
            selection=[BENCHMARK],
        )
        assert run.success
    before = resolver(defs, instance)
    assert before.get_status(BENCHMARK, "byo") == StaleStatus.FRESH
    assert before.get_status(BENCHMARK, "tiny") == StaleStatus.FRESH

    with model.open("ab") as file:
        file.write(b"new bytes")
    observe_changed(defs, instance, cursor)
    after = resolver(defs, instance)
    assert after.get_status(BENCHMARK, "byo") == StaleStatus.STALE
    (cause,) = after.get_stale_causes(BENCHMARK, "byo")
    assert cause.reason == "has a new dependency data version"
    assert cause.dependency is not None
    assert (cause.dependency.asset_key, cause.dependency.partition_key) == (key, "byo")
    assert after.get_status(BENCHMARK, "tiny") == StaleStatus.FRESH
