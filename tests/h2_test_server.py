"""What the tests' HTTP/2 servers on h2 share: a free loopback port, a thread per
connection, a count of the connections, and a close that cuts them all. Each server
says how it serves a connection (:meth:`H2TestServer.serve`)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from retrysafe.chaos.connection import listening_socket


class H2TestServer:
    """An HTTP/2 server for a test; ``url`` is its address, ``connections`` the
    connections it has accepted."""

    def __init__(self) -> None:
        self._listener = listening_socket("127.0.0.1")
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.connections = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, name=type(self).__name__, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # closed: the test is done
                return
            self.connections += 1
            self._open.append(sock)
            threading.Thread(target=self.serve, args=(sock,), daemon=True).start()

    def serve(self, sock: socket.socket) -> None:
        """Serve the connection ``sock`` until it closes."""
        raise NotImplementedError

    @staticmethod
    def start_h2(sock: socket.socket, poll: float, **config: Any) -> Any:
        """h2's server side of the connection ``sock``, its settings sent (h2's
        ``H2Configuration`` takes ``config``); each read of ``sock`` then waits at most
        ``poll`` seconds (see :meth:`received`)."""
        import h2.config
        import h2.connection

        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **config))
        conn.initiate_connection()
        sock.settimeout(poll)
        sock.sendall(conn.data_to_send())
        return conn

    @staticmethod
    def received(sock: socket.socket) -> bytes | None:
        """What the client sent on ``sock``: ``b""`` once it closed the connection, None
        if nothing came within the poll of :meth:`start_h2`."""
        try:
            return sock.recv(65536)
        except TimeoutError:
            return None

    def close(self) -> None:
        self._listener.close()
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
