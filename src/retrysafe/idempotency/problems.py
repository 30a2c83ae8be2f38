"""The middleware's own answers, as RFC 9457 ``application/problem+json`` documents."""

from __future__ import annotations

import dataclasses
import json

from retrysafe.idempotency.asgi import Send

__all__ = [
    "PROBLEM_HEADER",
    "PROBLEM_TYPE_PREFIX",
    "Problem",
    "body_too_large",
    "caller_unknown",
    "in_flight",
    "key_malformed",
    "key_missing",
    "key_reused",
    "not_replayable",
    "send_problem",
    "store_unavailable",
]

#: Each problem's ``type`` is this prefix plus its slug, e.g. ``…:key-reused``: stable
#: identifiers a client can switch on (not links to fetch).
PROBLEM_TYPE_PREFIX = "urn:retrysafe:idempotency:"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One refusal: the status, a stable slug, a fixed title and this request's detail."""

    status: int
    slug: str
    title: str
    detail: str
    headers: tuple[tuple[str, str], ...] = ()

    def document(self) -> dict[str, object]:
        """The problem document: ``type``, ``title``, ``status`` and ``detail``."""
        return {
            "type": PROBLEM_TYPE_PREFIX + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }


#: Set on every answer the middleware gives itself, to the problem's slug (e.g.
#: ``key-reused``): a client tells the middleware's 422 from the app's own 422 by this
#: header (or by the document's ``type``), never by the status alone.
PROBLEM_HEADER = "Idempotency-Problem"


async def send_problem(send: Send, problem: Problem) -> None:
    """Answer the request with ``problem``, marked with :data:`PROBLEM_HEADER`."""
    body = json.dumps(problem.document(), separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        (PROBLEM_HEADER.lower().encode("latin-1"), problem.slug.encode("latin-1")),
        *((name.encode("latin-1"), value.encode("latin-1")) for name, value in problem.headers),
    ]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def key_missing(header: str, method: str) -> Problem:
    """A keyless request where a key is required."""
    return Problem(
        400,
        "key-missing",
        "Idempotency key required",
        f"{method} requests here must carry an {header} header: one unique value per"
        " operation, reused on every retry of it.",
    )


def key_malformed(detail: str) -> Problem:
    """A key that cannot be used (empty, too long, bad characters, repeated header)."""
    return Problem(400, "key-malformed", "Malformed idempotency key", detail)


def caller_unknown(header: str) -> Problem:
    """A keyed request with no verified caller: keys are never pooled between callers."""
    return Problem(
        401,
        "caller-unknown",
        "Caller not identified",
        f"{header} values are kept per caller; authenticate so the key has an owner.",
    )


def body_too_large(limit: int) -> Problem:
    """A keyed request whose body is too large to fingerprint."""
    return Problem(
        413,
        "body-too-large",
        "Request body too large",
        f"A request with an idempotency key may carry at most {limit} bytes of body.",
    )


def key_reused(header: str) -> Problem:
    """The key was first used with a different request."""
    return Problem(
        422,
        "key-reused",
        "Idempotency key reused",
        f"This {header} was first used with a different request (method, path, query,"
        " body or Content-Type). Send a new key for a new operation.",
    )


def in_flight(header: str, retry_after: int) -> Problem:
    """The first request with this key is still running."""
    return Problem(
        409,
        "request-in-flight",
        "Request in progress",
        f"A request with this {header} is still being processed, or the server"
        " processing it stopped before it finished (its claim then lapses when its lease"
        f" ends). Retry after {retry_after} s to get its response.",
        (("retry-after", str(retry_after)),),
    )


def not_replayable(header: str) -> Problem:
    """The request finished but its response was not kept; it will not run again."""
    return Problem(
        409,
        "result-not-replayable",
        "Result not replayable",
        f"A request with this {header} already ran, but its response could not be kept"
        " for replay. It will not run again; check the outcome another way.",
    )


def store_unavailable(retry_after: int) -> Problem:
    """The idempotency store could not be used, so the handler was not run."""
    return Problem(
        503,
        "store-unavailable",
        "Idempotency store unavailable",
        "The request was not processed because its idempotency key could not be checked."
        f" Retry it with the same key after {retry_after} s.",
        (("retry-after", str(retry_after)),),
    )
