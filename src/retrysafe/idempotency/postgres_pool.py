"""A small pool of psycopg async connections, opened on demand and reused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["ConnectionPool"]


class ConnectionPool:
    """At most ``size`` autocommit connections to one database, shared by concurrent tasks.

    A connection that saw any error is closed rather than reused, since its state is
    unknown; the next task opens a fresh one. ``prepare`` runs once on each new
    connection (the store creates its table there).
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

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[tuple[Any, ...]]]:
        """Borrow a connection for one unit of work."""
        async with self._slots:
            connection = await self._take()
            try:
                yield connection
            except BaseException:
                await _close_quietly(connection)
                raise
            self._idle.append(connection)

    async def close(self) -> None:
        """Close the idle connections (borrowed ones are closed when given back broken)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close_quietly(connection)

    async def _take(self) -> AsyncConnection[tuple[Any, ...]]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and not connection.broken:
                return connection
        import psycopg

        connection = await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=max(2, round(self._connect_timeout)),
        )
        try:
            await self._prepare(connection)
        except BaseException:
            await _close_quietly(connection)
            raise
        return connection


async def _close_quietly(connection: AsyncConnection[tuple[Any, ...]]) -> None:
    with contextlib.suppress(Exception):
        await connection.close()
