"""Security promises: stage types only from the registry, YAML read with limits, SQL over
read-only connections without external access, spec file paths inside the allowed roots,
servers on loopback, and no environment secret in manifests, MLflow or Dagster metadata."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
import yaml
from typer.testing import CliRunner

from analysis.warehouse.db import connect_writer
from analysis.warehouse.loader import ensure_schema
from analysis.warehouse.reader import connect_read_only
from bench_defs.assets.benchmark import benchmark_run
from bench_defs.assets.warehouse import warehouse
from bench_defs.core.specs import SPEC_PARTITIONS
from stages.cli.app import app
from stages.library.retrieval.sql import SqlRetrievalStage
from stages.validation.loading import load_spec
from stages.validation.paths import with_resolved_files
from tests.dagster.fixtures import (  # noqa: F401 - fixtures used below
    home,
    instance,
    resources,
    specs_dir,
)
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO
from tests.library.rag_fixtures import make_stage, query_with
from tests.reliability import figures

runner = CliRunner()


def one_stage_spec(stage: dict[str, Any], **loadgen: Any) -> dict[str, Any]:
    loadgen = {"type": "closed_loop", "duration_s": 1, "timeout_s": 20, **loadgen}
    return {"name": "sec", "pipelines": [{"name": "p", "loadgen": loadgen, "stages": [stage]}]}


def validate(path: Path, *extra: str) -> Any:
    return runner.invoke(app, ["validate", str(path), *extra])


# --------------------------------------------------------------------------- stage types


@pytest.mark.parametrize(
    ("stage_type", "module"),
    [
        ("antigravity.fly", "antigravity"),
        ("http.server:HTTPServer", "http.server"),
        ("xmlrpc.server.SimpleXMLRPCServer", "xmlrpc.server"),
        ("os.system", None),
        ("__import__('os').system('id')", None),
    ],
)
def test_stage_types_come_from_the_registry_only(
    tmp_path: Path, stage_type: str, module: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if module is not None:  # another test may have imported it: forgotten for this one
        monkeypatch.delitem(sys.modules, module, raising=False)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(one_stage_spec({"id": "s", "type": stage_type})))
    result = validate(path)
    assert result.exit_code == 2
    assert f"{path}: pipelines[0].stages[0].type: unknown stage type" in result.stderr
    assert module is None or module not in sys.modules  # nothing was imported to look it up
    figures.count("security_checks", "stage_type_not_imported")


# --------------------------------------------------------------------------- YAML limits


def test_spec_size_limit_is_env_overridable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(one_stage_spec({"id": "s", "type": "noop"})))
    assert validate(path).exit_code == 0
    size = len(path.read_bytes())
    monkeypatch.setenv("COLLOBENCH_SPEC_MAX_BYTES", str(size))
    assert validate(path).exit_code == 0
    refused = validate(path, "--set", "name=" + "x" * size)
    assert refused.exit_code == 2 and "--set: 'name=xxx" in refused.stderr
    assert f"is longer than {size} bytes" in refused.stderr
    monkeypatch.setenv("COLLOBENCH_SPEC_MAX_BYTES", str(size - 1))
    refused = validate(path)
    assert refused.exit_code == 2 and f"{path}: larger than {size - 1} bytes" in refused.stderr
    monkeypatch.setenv("COLLOBENCH_SPEC_MAX_BYTES", "lots")
    refused = validate(path)
    assert refused.exit_code == 2 and "COLLOBENCH_SPEC_MAX_BYTES: 'lots'" in refused.stderr
    figures.count("security_checks", "yaml_size_limit")


def test_set_values_go_through_the_same_safe_loader(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(one_stage_spec({"id": "s", "type": "noop"})))
    for value, reason in [
        ("!!python/object/apply:os.system ['id']", "could not determine a constructor"),
        ("[" + "*a, " * 5 + "]", "undefined alias"),
        ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
    ]:
        result = validate(path, "--set", f"pipelines.0.stages.0.config={value}")
        assert result.exit_code == 2, value
        assert f"{path}: --set pipelines.0.stages.0.config: bad value" in result.stderr
        assert reason in result.stderr, result.stderr
    figures.count("security_checks", "set_safe_loader")


# --------------------------------------------------------------------------- SQL


def test_reader_connections_have_external_access_off_and_locked(tmp_path: Path) -> None:
    db = tmp_path / "results.duckdb"
    writer = connect_writer(db)
    ensure_schema(writer, db)
    writer.close()
    connection = connect_read_only(db)
    try:
        settings = dict(
            connection.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN "
                "('enable_external_access', 'lock_configuration', 'access_mode')"
            ).fetchall()
        )
        assert settings == {
            "enable_external_access": "false",
            "lock_configuration": "true",
            "access_mode": "read_only",
        }
        with pytest.raises(duckdb.PermissionException):
            connection.execute("SELECT * FROM read_csv('/etc/passwd')")
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            connection.execute("SET enable_external_access = true")
    finally:
        connection.close()
    figures.count("security_checks", "reader_connection_locked")


def test_a_reader_reads_the_registered_files_and_no_other(tmp_path: Path) -> None:
    """The raw-table views read the loaded runs' Parquet files; nothing else opens: not an
    unloaded run's file beside them, not a glob, and the allowed paths cannot be widened."""
    from analysis.warehouse.loader import load_runs
    from tests.analysis.runs import collocated_run, single_pipeline_run

    db = tmp_path / "results.duckdb"
    loaded = single_pipeline_run(tmp_path / "runs").write()
    stranger = collocated_run(tmp_path / "runs").write()  # beside it, never loaded
    load_runs([loaded], db)
    connection = connect_read_only(db)
    try:
        assert connection.execute("SELECT count(*) FROM queries").fetchall()[0][0] > 0
        own = str((loaded / "queries.parquet").resolve())
        assert connection.execute(f"SELECT count(*) FROM read_parquet('{own}')").fetchall()
        for path in (stranger / "queries.parquet", tmp_path / "runs" / "*" / "queries.parquet"):
            with pytest.raises(duckdb.PermissionException):
                connection.execute(f"SELECT count(*) FROM read_parquet('{path}')")
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            connection.execute(f"SET allowed_paths = ['{stranger / 'queries.parquet'}']")
    finally:
        connection.close()


def test_retrieval_sql_cannot_read_other_files_at_run_time(tmp_path: Path) -> None:
    """A SELECT passes validation, but the stage's connection has external access off."""
    database = tmp_path / "facts.duckdb"
    connection = duckdb.connect(str(database))
    connection.execute("CREATE TABLE facts AS SELECT range AS id FROM range(3)")
    connection.close()
    stage = make_stage(
        SqlRetrievalStage,
        {"database": str(database), "sql": "SELECT * FROM read_csv('/etc/passwd')"},
        tmp_path,
    )
    try:
        with pytest.raises(duckdb.PermissionException):
            stage.run(query_with(None))
    finally:
        stage.close()
    figures.count("security_checks", "retrieval_sql_external_access_off")


# --------------------------------------------------------------------------- file paths


def test_file_paths_stay_inside_the_allowed_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, elsewhere = tmp_path / "bench", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (elsewhere / "arrivals.csv").write_text("offset_ms\n0\n")
    (folder / "link").symlink_to(elsewhere)
    path = folder / "spec.yaml"

    def check(trace: str) -> Any:
        stage = {"id": "s", "type": "noop"}
        path.write_text(yaml.safe_dump(one_stage_spec(stage, type="trace", trace=trace)))
        return validate(path)

    for trace in (
        "../elsewhere/arrivals.csv",
        str(elsewhere / "arrivals.csv"),
        "link/arrivals.csv",
    ):
        refused = check(trace)
        assert refused.exit_code == 2, trace
        assert f"{path}: pipelines[0].loadgen.trace: {trace!r} resolves to" in refused.stderr
    # the opt-out: a root the user names
    monkeypatch.setenv("COLLOBENCH_ALLOWED_ROOTS", f"/nonexistent:{elsewhere}")
    assert check("../elsewhere/arrivals.csv").exit_code == 0
    monkeypatch.delenv("COLLOBENCH_ALLOWED_ROOTS")
    # COLLOBENCH_HOME is a root too
    monkeypatch.setenv("COLLOBENCH_HOME", str(elsewhere))
    assert check("link/arrivals.csv").exit_code == 0
    figures.count("security_checks", "file_paths_in_roots")


def test_stage_file_fields_are_resolved_against_the_spec_folder(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    stage = {
        "id": "q",
        "type": "retrieval.sql",
        "config": {"database": "f.duckdb", "sql": "SELECT 1"},
    }
    path.write_text(yaml.safe_dump(one_stage_spec(stage)))
    loaded = load_spec(path)
    resolved = with_resolved_files(loaded.spec, tmp_path)
    assert resolved.pipelines[0].stages[0].config["database"] == str(tmp_path / "f.duckdb")
    assert loaded.spec.pipelines[0].stages[0].config["database"] == "f.duckdb"  # untouched


# --------------------------------------------------------------------------- servers


SERVER_COMMAND = re.compile(r"(dagster dev|dagster-webserver|mlflow (ui|server)|http\.server)")


def test_documented_and_make_servers_bind_loopback() -> None:
    """Every server command in the Makefile and the README names 127.0.0.1 (the running
    dagster dev and mlflow ui are checked with psutil in their own tests)."""
    found = []
    for source in (REPO / "Makefile", REPO / "README.md"):
        for line in source.read_text().splitlines():
            if SERVER_COMMAND.search(line) and not line.lstrip().startswith(("|", "#")):
                if "`" in line and not line.lstrip().startswith((".venv", "$(BIN)", "\t")):
                    continue  # prose naming a command, not the command
                found.append(line)
                assert re.search(r"(-h|--host)[ =]127\.0\.0\.1", line), (source.name, line)
    assert len(found) >= 3, found  # make ui, its README copy and the mlflow ui line
    figures.count("security_checks", "server_commands_loopback")


# --------------------------------------------------------------------------- secrets


PLANTED = {
    "AWS_SECRET_ACCESS_KEY": "planted-secret-aws-1",
    "HF_TOKEN": "planted-secret-hf-2",
    "MLFLOW_TRACKING_PASSWORD": "planted-secret-mlflow-3",
    "MY_API_KEY": "planted-secret-key-4",
    "COLLOBENCH_DB_PASS": "planted-secret-pass-5",
    "OMP_PRIVATE_TOKEN": "planted-secret-omp-6",
    "CUDA_SESSION": "planted-secret-cuda-7",
    "HF_ENDPOINT": "https://me:planted-secret-url-8@mirror.invalid/hf?access_token=planted-9",
    "PYTORCH_ALIAS": "planted-secret-aws-1",  # a secret value under a harmless name
}


def files_mentioning(root: Path, needle: bytes) -> list[str]:
    return [str(path) for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


@pytest.mark.spawns
@pytest.mark.slow
def test_no_planted_secret_reaches_manifest_mlflow_or_dagster(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    instance: dg.DagsterInstance,  # noqa: F811
    resources: dict[str, Any],  # noqa: F811
    specs_dir: Path,  # noqa: F811
    home: Path,  # noqa: F811
) -> None:
    """A real run (the Pipes child runs `collobench run` with MLflow on) under planted secrets:
    none is in any file of the run directory, the home (warehouse, MLflow store and
    artifacts) or the Dagster materialisations and checks."""
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLLOBENCH_MLFLOW", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home / 'mlflow.db'}")
    write_spec(specs_dir, "tiny", tiny_spec())
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["tiny"])
    result = dg.materialize(
        [benchmark_run, warehouse], partition_key="tiny", instance=instance, resources=resources
    )
    assert result.success
    manifests = list(home.rglob("manifest.json"))
    assert manifests, "the run wrote no manifest"
    mlflow_db = home / "mlflow.db"
    with sqlite3.connect(mlflow_db) as store:
        params = store.execute("SELECT count(*) FROM params").fetchone()
    assert params and params[0] > 0, "MLflow recorded nothing"
    metadata = [
        repr(dict(event.materialization.metadata))
        for event in result.get_asset_materialization_events()
    ] + [
        repr(check.metadata) + str(check.description)
        for check in result.get_asset_check_evaluations()
    ]
    assert metadata
    for value in {value for value in PLANTED.values()} | {"planted-9"}:
        secret = value.split("@")[0].split(":")[-1] if "@" in value else value
        assert not files_mentioning(home, secret.encode()), secret
        assert not files_mentioning(specs_dir, secret.encode()), secret
        assert not any(secret in text for text in metadata), secret
    env = yaml.safe_load(manifests[0].read_text())["environment"]["env"]
    assert env["HF_ENDPOINT"] == "https://***@mirror.invalid/hf?access_token=***"
    assert env["PYTORCH_ALIAS"] == "***"
    figures.count("security_checks", "no_planted_secret")
