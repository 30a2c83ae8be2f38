"""IdempotencyMiddleware: run each keyed write once per caller, replay its outcome after."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Collection

import anyio

from retrysafe.clock import SystemClock
from retrysafe.idempotency import problems
from retrysafe.idempotency.asgi import ASGIApp, Receive, Scope, Send
from retrysafe.idempotency.commit import SCOPE_KEY, IdempotentRequest
from retrysafe.idempotency.decisions import Finish, answer_repeat, finish_claim
from retrysafe.idempotency.fingerprint import request_fingerprint
from retrysafe.idempotency.held_claim import HeldClaim, WallClock
from retrysafe.idempotency.key_header import KeyProblem, read_key
from retrysafe.idempotency.problems import Problem, send_problem
from retrysafe.idempotency.records import Claimed, IdempotencyRecord, StoredResponse
from retrysafe.idempotency.redirect_hops import (
    MAX_HOPS,
    hop_key,
    redirect_target,
    request_target,
)
from retrysafe.idempotency.replay import send_replay, stored_response
from retrysafe.idempotency.request_body import BodyRefused, read_body, replaying_receive
from retrysafe.idempotency.response_capture import ResponseCapture
from retrysafe.idempotency.settings import (
    DEFAULT_METHODS,
    DEFAULT_RELEASE_STATUSES,
    IdempotencySettings,
)
from retrysafe.idempotency.store import IdempotencyStore, StoreUnavailable

# (imported for typing.get_type_hints; without Starlette the middleware refuses to start)
with contextlib.suppress(ImportError):
    from starlette.requests import Request

__all__ = ["CallerScope", "IdempotencyMiddleware", "WallClock", "credential_scope"]

logger = logging.getLogger("retrysafe.idempotency")

#: Names the verified caller of a request (a user, tenant or API-key id); keys are kept
#: per caller. ``None`` or ``""`` means "not identified" and a keyed request gets 401.
#: It is given the request before its body is read, and must not read the body.
CallerScope = Callable[["Request"], "str | Awaitable[str | None] | None"]

#: The ``Retry-After`` seconds told to a client whose request met a store that was down.
STORE_DOWN_RETRY_AFTER = 1

#: A claim whose write took longer than this share of the lease has its lease started
#: again (fenced by its token) before the handler runs, so the handler starts with at
#: least 90 % of the lease ahead whatever the store made it wait.
_LATE_CLAIM_SHARE = 0.1

#: Store attributes holding how long one store operation may wait, most specific first:
#: SQLiteStore's ``busy_timeout``; RedisStore's and PostgresStore's ``timeout``.
_STORE_TIMEOUTS = ("busy_timeout", "timeout")

# Server-side shortcuts that send a file without passing its bytes through ``send``;
# the middleware hides them from the app so the response can be copied.
_UNCOPYABLE_EXTENSIONS = ("http.response.pathsend", "http.response.zerocopy")


@dataclasses.dataclass(frozen=True)
class _Admitted:
    """A keyed request that may try to claim its key."""

    caller: str
    key: str
    body: bytes
    fingerprint: str


class IdempotencyMiddleware:
    """Pure ASGI middleware that makes keyed writes safe to retry.

    For a request whose method is in ``methods`` and that carries the key header, it
    claims (caller, key) atomically in ``store`` before the handler runs. A repeat of the
    same request gets the kept response again, marked ``Idempotent-Replayed: true``; a
    repeat while the first runs gets 409 with ``Retry-After``; the same key with another
    method, path, query, body or media type gets 422. Refusals are ``application/problem+json`` with
    an ``Idempotency-Problem`` header naming the problem (``key-reused`` for that 422), so
    a client tells them from the app's own answers of the same status. If the store
    cannot be used, the request gets 503 with ``Retry-After`` and the handler does not
    run. A claim's lease starts when the store has written it (a claim the store kept
    waiting is renewed before the handler runs); while the handler runs the lease is
    renewed; its outcome is written when it ends, tried again if the store blinks.

    Which outcomes are kept: only those of requests that were processed. Every 5xx, an
    exception, and the ``release_statuses`` that say the request was refused before
    anything was done (by default 401, 403, 408, 422, 429; FastAPI answers a body that
    fails validation with 422) keep nothing and free the key, so the corrected request
    can be sent under the same key, unless the handler called ``mark_committed``.

    ``scope`` is called with the Starlette ``Request``, before the body is read, and
    returns the caller, so one caller's keys never meet another's. Place the middleware
    inside an authentication middleware and return the user it verified; where
    authentication runs after all middleware (a FastAPI dependency), use
    :func:`credential_scope`, which keeps keys per credential.

    Args:
        app: the ASGI app to guard.
        store: where claims and kept responses live (:class:`MemoryStore`,
            :class:`SQLiteStore`, :class:`RedisStore`, :class:`PostgresStore`).
        scope: ``(request) -> caller id`` (or an awaitable of it).
        required: whether a keyless request for a guarded method is refused (400) or
            passed through unguarded.
        clock: source of wall-clock time for leases and retention.

    The remaining keyword arguments are the fields of :class:`IdempotencySettings`.
    Needs the ``server`` extra (Starlette): ``pip install 'retrysafe[server]'``.
    """

    def __init__(
        self,
        app: ASGIApp,
        store: IdempotencyStore,
        *,
        scope: CallerScope,
        required: bool,
        ttl: float = 86_400.0,
        lease: float = 60.0,
        header: str = "Idempotency-Key",
        methods: Collection[str] = DEFAULT_METHODS,
        max_key_length: int = 255,
        max_body_size: int = 1_048_576,
        max_response_size: int = 1_048_576,
        in_flight_retry_after: float = 1.0,
        release_statuses: Collection[int] = DEFAULT_RELEASE_STATUSES,
        clock: WallClock | None = None,
    ) -> None:
        try:
            import starlette.requests  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "IdempotencyMiddleware needs starlette: pip install 'retrysafe[server]'"
            ) from exc
        if not callable(scope):
            raise TypeError(
                "scope must be a function of the request naming its caller, e.g. "
                "scope=credential_scope() or scope=lambda request: request.headers['x-user'] "
                f"(keys are kept apart per caller); got {type(scope).__name__}"
            )
        given: object = scope  # (typed as a scope, which credential_scope is not)
        if given is credential_scope:
            # (callable, but it makes the scope: each keyed request would get a function
            # for its caller, and answer 500)
            raise TypeError(
                "scope=credential_scope makes a scope: call it, scope=credential_scope() "
                "(or credential_scope('X-Api-Key') for another header)"
            )
        self.app = app
        self.store = store
        self.settings = IdempotencySettings(
            required=required,
            ttl=ttl,
            lease=lease,
            header=header,
            methods=methods,
            max_key_length=max_key_length,
            max_body_size=max_body_size,
            max_response_size=max_response_size,
            in_flight_retry_after=in_flight_retry_after,
            release_statuses=release_statuses,
        )
        _check_lease_outlasts_store(self.settings.lease, store)
        self._caller_of = scope
        self._clock: WallClock = clock if clock is not None else SystemClock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.settings
        if scope["type"] != "http" or str(scope["method"]).upper() not in settings.methods:
            await self.app(scope, receive, send)
            return
        key = read_key(scope["headers"], settings.header, max_length=settings.max_key_length)
        if key is None and not settings.required:
            await self.app(scope, receive, send)
            return
        admitted = await self._admit(scope, receive, key)
        if isinstance(admitted, Problem):
            await send_problem(send, admitted)
            return
        if admitted is None:
            return  # the client left while sending its body; nothing was claimed
        stamped = self._clock.time()
        #: The key the request's outcome is kept under: its own, or a redirect hop's.
        kept_as = admitted.key
        try:
            claim = await self.store.claim(
                admitted.caller,
                admitted.key,
                admitted.fingerprint,
                now=stamped,
                lease=settings.lease,
            )
            if isinstance(claim, IdempotencyRecord) and claim.fingerprint != admitted.fingerprint:
                hop = await self._claim_hop(admitted, claim, request_target(scope), stamped)
                if hop is not None:
                    kept_as, claim = hop
        except StoreUnavailable as exc:
            logger.warning("idempotency store unavailable, refusing a keyed request: %s", exc)
            await send_problem(send, problems.store_unavailable(STORE_DOWN_RETRY_AFTER))
            return
        # The store may have waited (for a lock, a connection) before writing the claim,
        # whose lease it stamped from ``stamped``: all that follows reads the time anew.
        held_at = self._clock.time()
        if isinstance(claim, IdempotencyRecord):
            answer = answer_repeat(claim, admitted.fingerprint, now=held_at, settings=settings)
            if isinstance(answer, Problem):
                await send_problem(send, answer)
            else:
                await send_replay(send, answer)
            return
        guarded = IdempotentRequest(admitted.caller, admitted.key)
        held = HeldClaim(
            self.store,
            guarded.caller,
            kept_as,
            claim.token,
            clock=self._clock,
            settings=settings,
            leased_at=stamped,
        )
        if held_at - stamped > settings.lease * _LATE_CLAIM_SHARE:
            refused = await self._restart_lease(held)
            if refused is not None:
                await send_problem(send, refused)
                return
        await self._run_claimed(scope, admitted.body, send, guarded, held)

    async def _claim_hop(
        self, admitted: _Admitted, record: IdempotencyRecord, target: str, now: float
    ) -> tuple[str, Claimed | IdempotencyRecord] | None:
        """When the chain of 307/308 redirects kept from ``record`` leads to ``target``,
        this request is that redirect's hop: the hop's own key (see
        :mod:`~retrysafe.idempotency.redirect_hops`) and its claim under it. None when it
        leads elsewhere: a different request under the key."""
        store, caller = self.store, admitted.caller
        for _ in range(MAX_HOPS):
            location = redirect_target(record)
            if location is None:
                return None
            key = hop_key(admitted.key, location)
            claim = await store.claim(
                caller, key, admitted.fingerprint, now=now, lease=self.settings.lease
            )
            if location == target:
                return key, claim
            if isinstance(claim, Claimed):
                # No hop was ever sent there: this is no hop of the chain. (The claim
                # just taken is given back at once.)
                await store.release(caller, key, claim.token)
                return None
            record = claim
        return None

    async def _restart_lease(self, held: HeldClaim) -> Problem | None:
        """Start the lease of a claim that took long to write from now, before the handler
        runs; a claim that lapsed meanwhile and was taken over is not run (409)."""
        try:
            still_held = await held.renew_now()
        except StoreUnavailable as exc:
            logger.warning("idempotency store unavailable, refusing a keyed request: %s", exc)
            with anyio.CancelScope(shield=True):
                await held.finish("release", None)
            return problems.store_unavailable(STORE_DOWN_RETRY_AFTER)
        if still_held:
            return None
        logger.warning(
            "the claim on idempotency key %r of caller %r lapsed while the store wrote it"
            " and another request took the key over; this request is not run",
            held.key,
            held.caller,
        )
        retry_after = max(1, math.ceil(self.settings.in_flight_retry_after))
        return problems.in_flight(self.settings.header, retry_after)

    async def _admit(
        self, scope: Scope, receive: Receive, key: str | KeyProblem | None
    ) -> _Admitted | Problem | None:
        """Check the key and the caller, read and fingerprint the body: everything that
        must hold before a claim is tried."""
        settings = self.settings
        if key is None:
            return problems.key_missing(settings.header, scope["method"])
        if isinstance(key, KeyProblem):
            return problems.key_malformed(key.detail)
        caller = await self._caller(scope)
        if caller is None:
            return problems.caller_unknown(settings.header)
        body = await read_body(
            receive,
            limit=settings.max_body_size,
            content_length=_header(scope, b"content-length"),
        )
        if isinstance(body, BodyRefused):
            if body.reason == "too_large":
                return problems.body_too_large(settings.max_body_size)
            return None
        fingerprint = request_fingerprint(
            scope["method"],
            scope["path"],
            scope.get("query_string", b""),
            body,
            _header(scope, b"content-type"),
        )
        return _Admitted(caller, key, body, fingerprint)

    async def _run_claimed(
        self, scope: Scope, body: bytes, send: Send, guarded: IdempotentRequest, held: HeldClaim
    ) -> None:
        async def on_complete(capture: ResponseCapture) -> None:
            finish = finish_claim(
                capture.status,
                committed=guarded.committed,
                oversized=capture.oversized,
                settings=self.settings,
            )
            recorded = await held.finish(finish, _kept_response(finish, capture))
            if recorded and finish == "not_replayable":
                _warn_not_replayable(
                    held.key,
                    held.caller,
                    f"its response is larger than max_response_size "
                    f"({self.settings.max_response_size} bytes)",
                    self.settings.ttl,
                )

        capture = ResponseCapture(
            send,
            max_size=self.settings.max_response_size,
            on_complete=on_complete,
            runs_on_for=self.settings.lease,
        )
        inner_scope = dict(scope)
        inner_scope[SCOPE_KEY] = guarded
        extensions = scope.get("extensions")
        if extensions:
            inner_scope["extensions"] = {
                name: value
                for name, value in extensions.items()
                if name not in _UNCOPYABLE_EXTENSIONS
            }
        failure: Exception | None = None
        async with anyio.create_task_group() as renewal:
            renewal.start_soon(held.renew_until_finished)
            try:
                await self.app(inner_scope, replaying_receive(body, capture.sent), capture.send)
            except Exception as exc:
                # Raised again below, outside the task group, so it is not wrapped in an
                # exception group on its way to the server's error handling.
                failure = exc
            finally:
                if not capture.recorded:
                    # No complete response: the handler raised, was cancelled or sent nothing;
                    # or it stopped in the middle of its body, after a status the client may
                    # have read as done (a 201): one that would be kept is then not
                    # replayable (a retry must not run it again), and one that would free
                    # the key (a 5xx) still does. There is no whole body to keep.
                    finish = finish_claim(
                        capture.status,
                        committed=guarded.committed,
                        oversized=capture.status is not None,
                        settings=self.settings,
                    )
                    with anyio.CancelScope(shield=True):
                        recorded = await held.finish(finish, None)
                    if recorded and finish == "not_replayable":
                        _warn_not_replayable(
                            held.key,
                            held.caller,
                            "the handler stopped before its response was whole (it raised "
                            "after mark_committed(), or its body broke off)"
                            if capture.status is None or guarded.committed
                            else "its response's body broke off after its status was sent",
                            self.settings.ttl,
                        )
                held.stop()
                renewal.cancel_scope.cancel()  # (from this task: see renew_until_finished)
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None

    async def _caller(self, scope: Scope) -> str | None:
        from starlette.requests import Request

        caller = self._caller_of(Request(scope))
        if inspect.isawaitable(caller):
            caller = await caller
        if caller is not None and not isinstance(caller, str):
            raise TypeError(
                "the scope callable must return a str or None, got "
                f"{type(caller).__name__}"
                + (
                    " (a function: pass the function that names the caller)"
                    if callable(caller)
                    else ""
                )
            )
        return caller or None

    def __repr__(self) -> str:
        return f"IdempotencyMiddleware(store={self.store!r}, settings={self.settings!r})"


def _kept_response(finish: Finish, capture: ResponseCapture) -> StoredResponse | None:
    """The response to store: ``None`` unless the decision was to keep it."""
    if finish != "keep" or capture.status is None:
        return None
    return stored_response(capture.status, capture.headers, bytes(capture.body))


def _header(scope: Scope, name: bytes) -> str | None:
    for field, value in scope["headers"]:
        if field.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _store_timeout(store: object) -> tuple[str, float] | None:
    """The store's own limit on how long one operation may wait, and its name."""
    for name in _STORE_TIMEOUTS:
        for attribute in (name, f"_{name}"):
            value = getattr(store, attribute, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return name, float(value)
    return None


def _check_lease_outlasts_store(lease: float, store: object) -> None:
    """Refuse a lease the store could use up before the claim is even written."""
    found = _store_timeout(store)
    if found is None:
        return
    name, timeout = found
    if lease <= timeout:
        raise ValueError(
            f"lease={lease:g} s is not longer than {type(store).__name__}'s"
            f" {name}={timeout:g} s: a claim that waits that long for the store would be"
            " written with its lease already over, and a retry could run the handler a"
            f" second time. Set lease well above {timeout:g} s (the default is 60 s), or"
            f" lower the store's {name}."
        )


def credential_scope(
    header: str = "Authorization", *, secret: bytes | None = None
) -> Callable[[Request], str | None]:
    """A ``scope`` for apps whose authentication runs after the middleware.

    Under FastAPI, authentication is usually a dependency, which runs inside the route,
    after every middleware, so ``request.state`` holds no verified user yet when the
    middleware needs the caller. This scope keeps keys per credential instead: the
    caller is a SHA-256 digest of the ``header`` value (``"cred:<hex>"``), so two callers
    never share keys, and the credential itself is never stored. A request without the
    header has no caller (keyed: 401). The app still authenticates every request; an
    invalid credential's 401 is not kept (it is a release status).

    Args:
        header: the request header carrying the credential.
        secret: when given, the digest is an HMAC under it. Use one (the same on every
            server sharing the store) when credentials are guessable, like passwords in
            Basic auth, so a stolen store does not allow testing guesses against them.

    A caller who switches credential (a rotated token) starts a new key space: a retry
    sent with the new credential runs again. Use ``request.state`` from an outer
    authentication middleware where you have one.
    """
    field = header.lower().encode("latin-1")

    def caller(request: Request) -> str | None:
        values = [value for name, value in request.scope["headers"] if name.lower() == field]
        if len(values) != 1 or not bytes(values[0]).strip():
            return None
        credential = bytes(values[0]).strip()
        if secret is None:
            digest = hashlib.sha256(b"retrysafe-caller\0" + credential).hexdigest()
        else:
            digest = hmac.new(secret, credential, hashlib.sha256).hexdigest()
        return f"cred:{digest}"

    return caller


def _warn_not_replayable(key: str, caller: str, why: str, ttl: float) -> None:
    """Tell the operators that a key's request ran but its response is not kept: its
    repeats get 409 ``result-not-replayable`` for as long as the record lives."""
    logger.warning(
        "idempotency key %r of caller %r: the request ran, but its response is not kept "
        "for replay: %s; repeats of the key get 409 result-not-replayable for %g s (ttl)",
        key,
        caller,
        why,
        ttl,
    )
