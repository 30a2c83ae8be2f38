"""How soon a fleet's shared circuit breaker lets calls through after an outage ends.

A fleet of members (``RedisFleet`` instances in this one process: Redis tells processes
apart by their fleet, not their pid), each with its own ``retrysafe.Client`` and a few
threads calling in a loop, against a local server that answers 503 from 1 s into the run
for ``--down`` seconds, then 200 again. It prints the calls that succeeded, failed and
were refused (``CircuitOpen``), and how many 503s the server sent: what the breaker saved
the server, against how long it kept refusing after the server recovered.

A member votes after ``--vote-after`` failing calls in a row (5 here, as docs/fleet.md
suggests to cut an outage's load sooner; the default, 20, rarely opens it in so short a
run). Each failed fleet probe doubles the fleet's open period (0.5, 1, 2, 4, then 5 s), so
the fleet lets calls through about as soon as the outage ends, within one period.

Starts a private redis-server (as the tests do) and the server on free loopback ports.

    .venv/bin/python benchmarks/fleet_recovery.py [--down 2.5] [--run 9] [--members 4]
"""

from __future__ import annotations

import argparse
import collections
import http.server
import socketserver
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "tests" / "idempotency"))

from store_servers import redis_server  # noqa: E402

import retrysafe  # noqa: E402
from retrysafe.fleet import FleetSettings, RedisFleet  # noqa: E402
from retrysafe.governor import Governor, GovernorSettings  # noqa: E402


class _Outage:
    """When the server answers 503: from ``starts`` to ``starts + lasts`` seconds into the
    run (the run's start is set once the callers are ready)."""

    def __init__(self, starts: float, lasts: float) -> None:
        self.starts, self.lasts = starts, lasts
        self.began = time.monotonic()
        self.served: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()

    def status_now(self) -> int:
        into = time.monotonic() - self.began
        status = 503 if self.starts <= into < self.starts + self.lasts else 200
        with self.lock:
            self.served[status] += 1
        return status


def _serve(outage: _Outage) -> socketserver.ThreadingTCPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(outage.status_now())
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--down", type=float, default=2.5, help="seconds of 503s, from 1 s in")
    parser.add_argument("--run", type=float, default=9.0, help="seconds the callers call")
    parser.add_argument("--members", type=int, default=4, help="fleet members")
    parser.add_argument("--threads", type=int, default=3, help="calling threads per member")
    parser.add_argument("--vote-after", type=int, default=5, help="FleetSettings.vote_after")
    args = parser.parse_args()
    outage = _Outage(1.0, args.down)
    server = _serve(outage)
    url = f"http://127.0.0.1:{server.server_port}/item"
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    with redis_server() as redis_url:
        namespace = f"recovery-{uuid.uuid4().hex[:8]}"
        settings = FleetSettings(vote_after=args.vote_after)
        fleets = [
            RedisFleet(redis_url, namespace=namespace, settings=settings)
            for _ in range(args.members)
        ]
        clients = [
            retrysafe.Client(governor=Governor(GovernorSettings(), fleet=fleet), dependency="api")
            for fleet in fleets
        ]

        def call_in_a_loop(client: retrysafe.Client) -> None:
            while time.monotonic() - outage.began < args.run:
                try:
                    client.get(url)
                    outcome = "ok"
                except retrysafe.ApiError as error:
                    outcome = type(error).__name__
                with lock:
                    outcomes[outcome] += 1
                time.sleep(0.03)

        callers = [
            threading.Thread(target=call_in_a_loop, args=(client,))
            for client in clients
            for _ in range(args.threads)
        ]
        outage.began = time.monotonic()
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        for client in clients:
            client.close()
        for fleet in fleets:
            fleet.close()
    server.shutdown()
    total = sum(outcomes.values())
    print(
        f"{args.members} members x {args.threads} threads, {args.run:g} s, 503s for "
        f"{args.down:g} s from 1 s in (vote_after={args.vote_after})"
    )
    for outcome, count in outcomes.most_common():
        print(f"  {outcome:<14} {count:>6}  ({100 * count / total:.1f} %)")
    print(f"  503s the server sent: {outage.served[503]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
