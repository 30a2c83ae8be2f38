"""Serve the shop app with uvicorn on a free loopback port, against a shared store.

Run by test_idempotency_processes.py as its own OS process:

    python serve_shop.py KIND LOCATION NAMESPACE RUNS_LOG HANDLER_DELAY

It prints the port it listens on, then serves until terminated.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import uvicorn
from idempotency_app import Shop, build_app
from idempotency_stores import open_store


def main() -> None:
    kind, location, namespace, runs_log, handler_delay = sys.argv[1:]
    store = open_store(kind, location, namespace)
    shop = Shop(handler_delay=float(handler_delay), runs_log=Path(runs_log))
    app = build_app(store, shop=shop)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print(listener.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
