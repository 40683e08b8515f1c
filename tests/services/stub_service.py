"""A tiny loopback HTTP server for lifecycle tests, run as a `command` service:
`python stub_service.py PORT [--child] [--ignore-term] [--ready-after S] [--fail-warmup]
[--exit-after S]`.

GET /health answers 503 until `--ready-after` seconds passed, then 200; POST /v1/completions
answers 200 (500 with `--fail-warmup`). `--child` starts a sleeping child in the same process
group; `--ignore-term` makes the server ignore SIGTERM (stop must escalate to SIGKILL);
`--exit-after S` exits (status 1) after S seconds. Its log says its pid first."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--fail-warmup", action="store_true")
    parser.add_argument("--exit-after", type=float, default=None)
    options = parser.parse_args()
    if options.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.child:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ready_at = time.monotonic() + options.ready_after
    if options.exit_after is not None:
        signal.signal(signal.SIGALRM, lambda *_: sys.exit("stub service exits as told"))
        signal.setitimer(signal.ITIMER_REAL, options.exit_after)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_GET(self) -> None:
            self._answer(200 if time.monotonic() >= ready_at else 503)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._answer(500 if options.fail_warmup else 200)

        def log_message(self, format: str, *args: object) -> None:
            pass

    print(f"stub service pid {os.getpid()}", flush=True)
    print("stub service listening", flush=True)
    ThreadingHTTPServer(("127.0.0.1", options.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
