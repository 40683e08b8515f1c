"""`python -m bench_defs.cluster up|down|status|restart-daemon|restart-worker HOST
[--workers N] [--default-worker] [--launcher celery|default]`."""

from __future__ import annotations

import argparse
import sys
import time

from bench_defs.cluster.control import down, restart_daemon, restart_worker, status_lines, up
from bench_defs.cluster.instance_config import LAUNCHERS
from bench_defs.cluster.layout import cluster_layout
from bench_defs.cluster.procs import ClusterError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench_defs.cluster")
    commands = ("up", "down", "status", "restart-daemon", "restart-worker")
    parser.add_argument("command", choices=commands)
    parser.add_argument("host", nargs="?", help="restart-worker: the host whose worker to start")
    parser.add_argument(
        "--workers", type=int, default=2, help="hosts of a new pools file (default 2)"
    )
    parser.add_argument(
        "--default-worker",
        action="store_true",
        help="also a worker on the default queue `dagster`, for runs without a pool tag",
    )
    parser.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="celery",
        help="celery: runs go to the workers (default); default: Dagster's DefaultRunLauncher, "
        "each run a subprocess of the code server, no workers",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    layout = cluster_layout()
    try:
        if args.command == "up":
            started = time.monotonic()
            state = up(layout, max(1, args.workers), args.default_worker, args.launcher)
            print(f"cluster up in {time.monotonic() - started:.1f} s: {state.webserver_url}")
            return 0
        if args.command == "down":
            stopped = down(layout)
            print(f"cluster down: stopped {', '.join(stopped) or 'nothing'}")
            return 0
        if args.command == "restart-daemon":
            record = restart_daemon(layout)
            print(f"daemon restarted: pid {record.pid}")
            return 0
        if args.command == "restart-worker":
            record = restart_worker(layout, args.host or "")
            print(f"worker of {args.host} restarted: pid {record.pid}")
            return 0
        lines, running = status_lines(layout)
        print("\n".join(lines))
        return 0 if running else 1
    except ClusterError as error:
        print(f"cluster {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
