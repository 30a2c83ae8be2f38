"""RedisStore: idempotency records in Redis, shared by every process and host that uses it."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import quote

import anyio

from retrysafe.idempotency.records import (
    Claimed,
    IdempotencyRecord,
    StoredResponse,
    record_from_fields,
)
from retrysafe.idempotency.store import StoreUnavailable, new_token
from retrysafe.redis_url import check_redis_url

logger = logging.getLogger("retrysafe.idempotency")

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["RedisStore"]

# Each script touches one key, so the store also works on Redis Cluster. A record is a
# hash; "expires_at" is compared with the caller's clock, and the key's own PEXPIRE only
# collects lapsed records. A claim or completion whose reply was lost may be retried by
# redis-py; the token makes the retry find its own earlier write instead of a stranger's.
_CLAIM = """
local fields = redis.call('HMGET', KEYS[1],
    'state', 'fingerprint', 'expires_at', 'status', 'headers', 'body', 'token')
if fields[1] and tonumber(fields[3]) > tonumber(ARGV[1]) then
    if fields[7] == ARGV[3] then return {'claimed'} end
    return {fields[1], fields[2], fields[3], fields[4], fields[5], fields[6]}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'in_flight', 'fingerprint', ARGV[2],
    'token', ARGV[3], 'expires_at', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {'claimed'}
"""

_COMPLETE = """
local fields = redis.call('HMGET', KEYS[1], 'token', 'state')
if fields[1] ~= ARGV[1] then return 0 end
if fields[2] ~= 'in_flight' then
    if fields[2] == ARGV[2] then return 1 end
    return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'expires_at', ARGV[6])
if ARGV[2] == 'completed' then
    redis.call('HSET', KEYS[1], 'status', ARGV[3], 'headers', ARGV[4], 'body', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
"""

_EXTEND = """
local fields = redis.call('HMGET', KEYS[1], 'token', 'state')
if fields[1] == ARGV[1] and fields[2] == 'in_flight' then
    redis.call('HSET', KEYS[1], 'expires_at', ARGV[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 1
end
return 0
"""

_RELEASE = """
local fields = redis.call('HMGET', KEYS[1], 'token', 'state')
if fields[1] == ARGV[1] and fields[2] == 'in_flight' then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""


_Script = Literal["claim", "complete", "extend", "release"]


class _LoopClient:
    """redis-py's asyncio client for one event loop, with the store's scripts on it."""

    __slots__ = ("claim", "client", "complete", "extend", "release")

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.claim: AsyncScript = client.register_script(_CLAIM)
        self.complete: AsyncScript = client.register_script(_COMPLETE)
        self.extend: AsyncScript = client.register_script(_EXTEND)
        self.release: AsyncScript = client.register_script(_RELEASE)


class RedisStore:
    """Records in Redis (redis-py's asyncio client), atomic through Lua scripts.

    Every worker process and host pointing at the same Redis shares the records. Each
    record carries its expiry, compared with the middleware's clock; Redis also expires
    the key itself once that time has passed, so nothing accumulates.

    A redis-py asyncio connection works only on the event loop that opened it, so the
    store keeps one client per running loop it is used on: one store made at import
    time serves an app that a test suite starts on a new loop per test, as the other
    stores do, and a closed loop's client is dropped when a new loop comes.
    Needs asyncio (redis-py's asyncio client does not run on trio).

    Needs the ``redis`` extra: ``pip install 'retrysafe[redis]'``.

    Args:
        url: a redis-py URL, such as ``redis://localhost:6379/0``.
        prefix: prepended to every Redis key this store writes.
        timeout: seconds one operation may take, redis-py's own reconnection attempts
            included, before failing closed with :class:`StoreUnavailable`.
    """

    def __init__(
        self, url: str, *, prefix: str = "retrysafe:idempotency:", timeout: float = 5.0
    ) -> None:
        try:
            import redis.asyncio
        except ImportError as exc:
            raise ImportError(
                "RedisStore needs the redis package: pip install 'retrysafe[redis]'"
            ) from exc
        if not isinstance(url, str):
            raise TypeError(
                "RedisStore(url): the URL must be a str, e.g. 'redis://127.0.0.1:6379/0'; "
                f"got {type(url).__name__}"
            )
        check_redis_url(url, "RedisStore")
        self._prefix = prefix
        self._timeout = timeout

        def connect() -> Redis:
            return redis.asyncio.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )

        self._connect: Callable[[], Redis] = connect
        try:
            connect()  # (a client connects when first used: this only reads the URL)
        except ValueError:
            # (not chained: redis-py's message quotes the part it could not read, which
            # may be the password's head)
            raise ValueError(
                "RedisStore(url): the URL cannot be parsed; percent-encode special "
                "characters in the password (e.g. '#' as %23, '@' as %40, '/' as %2F)"
            ) from None
        #: The client of each loop the store is used on; a closed loop's goes when the
        #: store is next used on a new loop (_client_for).
        self._per_loop: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._per_loop_lock = threading.Lock()
        self._closed = False
        #: Whether Redis was asked if it keeps its data across a restart (once a store).
        self._persistence_checked = False

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, now: float, lease: float
    ) -> Claimed | IdempotencyRecord:
        token = new_token()
        args = [repr(now), fingerprint, token, repr(now + lease), _milliseconds(lease)]
        reply = await self._call("claim", scope, key, args)
        if reply[0] == b"claimed":
            return Claimed(token)
        return record_from_fields(tuple(_text_fields(reply)))

    async def complete(
        self,
        scope: str,
        key: str,
        token: str,
        response: StoredResponse | None,
        *,
        now: float,
        ttl: float,
    ) -> bool:
        if response is None:
            parts: list[str | bytes] = ["not_replayable", "", "", b""]
        else:
            parts = ["completed", str(response.status), response.headers_json(), response.body]
        args = [token, *parts, repr(now + ttl), _milliseconds(ttl)]
        return bool(await self._call("complete", scope, key, args))

    async def extend(self, scope: str, key: str, token: str, *, now: float, lease: float) -> bool:
        args = [token, repr(now + lease), _milliseconds(lease)]
        return bool(await self._call("extend", scope, key, args))

    async def release(self, scope: str, key: str, token: str) -> bool:
        return bool(await self._call("release", scope, key, [token]))

    async def close(self) -> None:
        """Close every loop's connections; the store refuses every later operation.

        This loop's are closed here, and those of a loop running in another thread on
        that loop (waited for, up to ``timeout``). A loop that is not running (closed, or
        idle between ``run_until_complete`` calls) cannot run the close: its connections
        are dropped, and closed as Python collects them."""
        self._closed = True
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # (trio: the store was never used here)
            running = None
        with self._per_loop_lock:
            clients, self._per_loop = self._per_loop, {}
        for loop, client in clients.items():
            if loop is running:
                await client.client.aclose()
            elif loop.is_running():
                closing = asyncio.run_coroutine_threadsafe(client.client.aclose(), loop)
                with anyio.move_on_after(self._timeout):
                    await asyncio.wrap_future(closing)

    def _client_for(self, loop: asyncio.AbstractEventLoop) -> _LoopClient:
        """The running loop's client, made when the loop first asks.

        A loop seen for the first time also drops the clients of loops that have closed
        (a test suite's loop per test): their connections, which only their loop could
        close politely, are closed as Python collects them."""
        client = self._per_loop.get(loop)
        if client is None:
            with self._per_loop_lock:
                client = self._per_loop.get(loop)
                if client is None:
                    for gone in [seen for seen in self._per_loop if seen.is_closed()]:
                        del self._per_loop[gone]
                    client = self._per_loop[loop] = _LoopClient(self._connect())
        return client

    async def _call(
        self, script_name: _Script, scope: str, key: str, args: Sequence[str | bytes]
    ) -> Any:
        if self._closed:
            raise StoreUnavailable("RedisStore", "the store is closed")
        from redis.exceptions import RedisError

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "RedisStore runs on asyncio (redis-py's asyncio client does not run on "
                "trio): use SQLiteStore or MemoryStore there"
            ) from None
        client = self._client_for(loop)
        script: AsyncScript = getattr(client, script_name)

        redis_key = f"{self._prefix}{quote(scope, safe='')}:{quote(key, safe='')}"
        try:
            with anyio.fail_after(self._timeout):
                reply = await script(keys=[redis_key], args=list(args))
        except (RedisError, OSError, TimeoutError) as exc:
            reason = str(exc).strip() or "no answer in time"
            raise StoreUnavailable("RedisStore", f"{type(exc).__name__}: {reason}") from exc
        if not self._persistence_checked:
            # (after an operation Redis answered: asking costs the request a round trip or
            # two, never a wait on a Redis that does not answer; asked again next time if
            # Redis could not be asked now)
            self._persistence_checked = True  # (meanwhile: one question at a time)
            self._persistence_checked = await _warn_if_volatile(client.client)
        return reply

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self._prefix!r})"


#: How long the store waits for Redis to say whether it persists (it has just answered).
_PERSISTENCE_QUESTION_TIMEOUT: Final = 0.25


async def _warn_if_volatile(client: Redis) -> bool:
    """Log a warning if Redis keeps nothing across a restart (no append-only file, no
    snapshots): every record would go with it, and the repeats of its keys run their
    requests again. Nothing if Redis will not say (``CONFIG`` is refused on many managed
    services, which persist or replicate on their own). Whether Redis was asked: False
    if it could not be (no answer in time), to ask again later."""
    from redis.exceptions import ResponseError

    try:
        with anyio.fail_after(_PERSISTENCE_QUESTION_TIMEOUT):
            appendonly = (await client.config_get("appendonly")).get("appendonly")
            save = (await client.config_get("save")).get("save")
    except ResponseError:  # (CONFIG refused: an ACL, a managed service)
        return True
    except Exception:  # (no answer, or a connection lost: asked again later)
        return False
    if appendonly is None or save is None:
        return True  # (this Redis does not say)
    if _text(appendonly) == "no" and not _text(save).strip():
        logger.warning(
            "RedisStore: this Redis keeps nothing across a restart (appendonly no, no "
            "snapshots): a restart forgets every idempotency record, and the repeats of "
            "their keys run their requests again; turn on its append-only file (appendonly "
            "yes) or use a replicated Redis (see retrysafe's docs/stores.md)"
        )
    return True


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _milliseconds(seconds: float) -> str:
    return str(max(1, math.ceil(seconds * 1000)))


def _text_fields(reply: list[bytes | None]) -> list[Any]:
    """Decode the claim script's record reply; the body stays bytes."""
    state, fingerprint, expires_at, status, headers, body = reply
    return [
        (state or b"").decode(),
        (fingerprint or b"").decode(),
        float(expires_at or b"0"),
        int(status) if status else None,
        headers.decode() if headers else None,
        body or b"",
    ]
