"""The middleware's two decisions, free of I/O: how to answer a repeat, how to finish a claim."""

from __future__ import annotations

import math
from typing import Literal

from retrysafe.idempotency import problems
from retrysafe.idempotency.problems import Problem
from retrysafe.idempotency.records import IdempotencyRecord, StoredResponse
from retrysafe.idempotency.settings import IdempotencySettings

__all__ = ["Finish", "answer_repeat", "finish_claim"]

#: ``keep``: store the response for replay. ``release``: free the key so a repeat runs
#: afresh. ``not_replayable``: record that it ran, without a response to replay.
Finish = Literal["keep", "release", "not_replayable"]


def answer_repeat(
    record: IdempotencyRecord, fingerprint: str, *, now: float, settings: IdempotencySettings
) -> Problem | StoredResponse:
    """How to answer a request whose key is held by ``record``.

    A different request under the key is refused (422) whatever the record's state; the
    same request gets 409 while the first runs, 409 if its response was not kept, and
    the kept response otherwise.
    """
    if record.fingerprint != fingerprint:
        return problems.key_reused(settings.header)
    if record.state == "in_flight":
        wait = min(settings.in_flight_retry_after, record.expires_at - now)
        return problems.in_flight(settings.header, max(1, math.ceil(wait)))
    if record.state == "not_replayable" or record.response is None:
        return problems.not_replayable(settings.header)
    return record.response


def finish_claim(
    status: int | None, *, committed: bool, oversized: bool, settings: IdempotencySettings
) -> Finish:
    """What to do with a claim once the handler is done.

    ``status`` is ``None`` when the handler failed before completing a response. 5xx,
    :attr:`~IdempotencySettings.release_statuses` and failures free the key, unless the
    handler marked the request committed: then the outcome is kept, or recorded as not
    replayable when there is nothing (or too much) to keep.
    """
    if status is None:
        return "not_replayable" if committed else "release"
    if (status >= 500 or status in settings.release_statuses) and not committed:
        return "release"
    return "not_replayable" if oversized else "keep"
