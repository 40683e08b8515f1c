"""PostgreSQL (unix socket only) and Redis (loopback, no persistence) for the cluster."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from urllib.parse import quote

from bench_defs.cluster.layout import (
    DB_NAME,
    DB_USER,
    PG_OS_USER_ENV,
    PG_PORT,
    Layout,
    pg_bin,
)
from bench_defs.cluster.procs import ClusterError, ProcRecord, env_with, spawn, wait_ready

START_TIMEOUT_S = 60.0


def _as_pg_user() -> list[str]:
    """The prefix that drops root for Postgres (it refuses to run as root); empty otherwise."""
    if os.geteuid() != 0:
        return []
    user = os.environ.get(PG_OS_USER_ENV, "postgres")
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def _give_to_pg_user(*folders: Path) -> None:
    """As root: hand the folders to the Postgres account, and check that it can reach them."""
    if os.geteuid() != 0:
        return
    account = pwd.getpwnam(os.environ.get(PG_OS_USER_ENV, "postgres"))
    for folder in folders:
        for parent in folder.parents:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                raise ClusterError(
                    f"{parent}: not searchable by others; Postgres (as {account.pw_name}) "
                    f"cannot reach {folder}: put the cluster elsewhere (COLLOBENCH_HOME)"
                )
        os.chown(folder, account.pw_uid, account.pw_gid)
        folder.chmod(0o700)


def postgres_url(layout: Layout) -> str:
    """Dagster's storage URL: the database over the cluster's unix socket (psycopg2 named:
    SQLAlchemy 2.1 defaults to psycopg 3, which dagster-postgres does not install)."""
    query = f"host={quote(str(layout.sockets))}&port={PG_PORT}"
    return f"postgresql+psycopg2://{DB_USER}@/{DB_NAME}?{query}"


def _run(argv: list[str], what: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0 and "already exists" not in done.stderr:
        last = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise ClusterError(f"{what} failed ({done.returncode}): {last}")
    return done


def start_postgres(layout: Layout) -> ProcRecord:
    """initdb once, then `postgres` listening on `<root>/sockets` only; creates the database."""
    for folder in (layout.pgdata, layout.sockets):
        folder.mkdir(parents=True, exist_ok=True)
    _give_to_pg_user(layout.pgdata, layout.sockets)
    drop = _as_pg_user()
    if not (layout.pgdata / "PG_VERSION").is_file():
        initdb = [*drop, pg_bin("initdb"), "-D", str(layout.pgdata), "-U", DB_USER]
        _run([*initdb, "--auth=trust", "-E", "UTF8", "--no-instructions"], "initdb", layout.root)
    argv = [*drop, pg_bin("postgres"), "-D", str(layout.pgdata), "-k", str(layout.sockets)]
    argv += ["-p", str(PG_PORT), "-c", "listen_addresses=", "-c", "synchronous_commit=off"]
    argv += ["-c", "max_connections=200"]
    record = spawn("postgres", argv, env_with(), layout.log("postgres"), layout.root)
    ready = [
        pg_bin("pg_isready"),
        "-q",
        "-h",
        str(layout.sockets),
        "-p",
        str(PG_PORT),
        "-U",
        DB_USER,
    ]
    wait_ready(
        record,
        lambda: subprocess.run(ready, timeout=10, check=False).returncode == 0,
        START_TIMEOUT_S,
        "accepting connections",
    )
    createdb = [pg_bin("createdb"), "-h", str(layout.sockets), "-p", str(PG_PORT)]
    _run([*createdb, "-U", DB_USER, DB_NAME], "createdb", layout.root)
    return record


def stop_postgres(layout: Layout) -> None:
    """`pg_ctl stop -m fast` (the group kill after it catches what is left)."""
    if not (layout.pgdata / "postmaster.pid").is_file():
        return
    argv = [*_as_pg_user(), pg_bin("pg_ctl"), "stop", "-D", str(layout.pgdata)]
    subprocess.run(
        [*argv, "-m", "fast", "-w", "-t", "30"],
        cwd=layout.root,
        capture_output=True,
        timeout=60,
        check=False,
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pong(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16).startswith(b"+PONG")


def start_redis(layout: Layout) -> tuple[ProcRecord, str]:
    """redis-server on 127.0.0.1 and a free port, nothing saved to disk; (record, URL)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ClusterError("redis-server not found: apt-get install redis-server")
    layout.redis_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(layout.redis_dir), "--protected-mode", "yes"]
    record = spawn("redis", argv, env_with(), layout.log("redis"), layout.root)
    wait_ready(record, lambda: _pong(port), START_TIMEOUT_S, "answering PING")
    return record, f"redis://127.0.0.1:{port}/0"
