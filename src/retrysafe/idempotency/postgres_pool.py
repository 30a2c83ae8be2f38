"""A small pool of psycopg async connections, opened on demand and reused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["ConnectionPool"]

_T = TypeVar("_T")


class ConnectionPool:
    """At most ``size`` autocommit connections to one database, shared by concurrent tasks.

    A connection that saw any error is closed rather than reused, since its state is
    unknown; the next task opens a fresh one. ``prepare`` runs once on each new
    connection (the store creates its table there).

    An idle connection can die without anyone noticing (the server restarted, failed
    over, or ended idle sessions): psycopg only finds out when it is next used; what
    :meth:`run` does then is told there.
    """

    def __init__(
        self,
        dsn: str,
        *,
        size: int,
        connect_timeout: float,
        prepare: Callable[[AsyncConnection[tuple[Any, ...]]], Awaitable[None]],
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._prepare = prepare
        self._slots = asyncio.Semaphore(size)
        self._idle: list[AsyncConnection[tuple[Any, ...]]] = []

    async def run(self, work: Callable[[AsyncConnection[tuple[Any, ...]]], Awaitable[_T]]) -> _T:
        """Run one unit of ``work`` on a borrowed connection.

        If it fails on a reused connection and leaves it broken, that connection most
        likely died while idle, before the work began: the other idle ones are taken
        to have died with it and closed, and ``work`` runs once more on a fresh
        connection. (So ``work`` must be safe to run twice, in case it did reach the
        server: every statement of the store is.)
        """
        async with self._slots:
            connection, fresh = await self._take()
            try:
                return self._give_back(connection, await work(connection))
            except Exception:
                dead = connection.closed or connection.broken
                await _close_quietly(connection)
                if fresh or not dead:
                    raise
            except BaseException:
                await _close_quietly(connection)
                raise
            await self.close()
            connection, _ = await self._take()
            try:
                return self._give_back(connection, await work(connection))
            except BaseException:
                await _close_quietly(connection)
                raise

    def _give_back(self, connection: AsyncConnection[tuple[Any, ...]], result: _T) -> _T:
        """Keep ``connection`` for the next task; returns ``result``."""
        self._idle.append(connection)
        return result

    async def close(self) -> None:
        """Close the idle connections (borrowed ones are closed when given back broken)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close_quietly(connection)

    async def _take(self) -> tuple[AsyncConnection[tuple[Any, ...]], bool]:
        """An idle connection, or a new one; and whether it is new."""
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and not connection.broken:
                return connection, False
        import psycopg

        connection = await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=max(2, round(self._connect_timeout)),
            # Text comes back as str whatever the database's encoding: on a SQL_ASCII
            # database psycopg would hand every text column back as bytes.
            client_encoding="UTF8",
        )
        try:
            await self._prepare(connection)
        except BaseException:
            await _close_quietly(connection)
            raise
        return connection, True


async def _close_quietly(connection: AsyncConnection[tuple[Any, ...]]) -> None:
    with contextlib.suppress(Exception):
        await connection.close()
