"""From urllib3's ``Retry`` to a :class:`~retrysafe.RetryPolicy`: the migration helper.

Most requests users retry with ``HTTPAdapter(max_retries=Retry(...))``.
:func:`policy_from_retry` turns that ``Retry`` into the policy meaning the same
where retrysafe has an equivalent, and refuses, naming the field and what to do,
where it has none (silently dropping a setting would change behaviour unseen):

=============================  ======================================================
``Retry`` field                 ``RetryPolicy``
=============================  ======================================================
``total=N``                     ``attempts=N + 1`` (``total=0`` or ``False``: 1)
``status_forcelist``            ``retry_statuses``, plus 429 and 503
``allowed_methods``             ``idempotent_methods`` (others repeat only with a key)
``backoff_factor``              ``backoff_base`` (full jitter below it, doubling)
``backoff_max``                 ``backoff_cap``
``retry_after_max``             ``max_retry_after``
``respect_retry_after_header``  always on; ``False`` is refused
``raise_on_status``             ``RetryAdapter(raise_on_status=...)``
``connect``/``read``/           refused unless ``total`` is 0: retrysafe counts
``status``/``other``            attempts per call, and decides per outcome whether
                                repeating is safe
``allowed_methods=None``        refused: a POST is repeated only under an
                                idempotency key (``RetryAdapter(idempotency="auto")``)
``redirect``,                   not retrysafe's: requests follows redirects itself
``raise_on_redirect``,          (``Session.max_redirects``)
``remove_headers_on_redirect``
``backoff_jitter``              ignored: retrysafe's backoff is always fully jittered
=============================  ======================================================
"""

from __future__ import annotations

import dataclasses

from urllib3.util import Retry

from retrysafe.policy import RetryPolicy

__all__ = ["UnsupportedRetrySetting", "policy_from_retry"]


class UnsupportedRetrySetting(ValueError):
    """A ``Retry`` setting with no retrysafe equivalent; the message says what to do."""


#: What urllib3 repeats without status_forcelist (when it carries Retry-After) and
#: retrysafe's table also repeats: 429 and 503 (retrysafe waits out a 429 only while
#: retry_statuses holds it, as for any status). A 413 is never repeated.
_WAITED_OUT_STATUSES = frozenset({429, 503})


def policy_from_retry(retry: Retry | int, *, base: RetryPolicy | None = None) -> RetryPolicy:
    """The :class:`RetryPolicy` that does what ``retry`` did; ``base`` gives every
    other field (default ``RetryPolicy()``: timeouts and the deadline are retrysafe's
    own, urllib3 had none).

    Raises :class:`UnsupportedRetrySetting` for a setting retrysafe cannot honour.
    """
    if isinstance(retry, int) and not isinstance(retry, bool):
        retry = Retry.from_int(retry)
    if not isinstance(retry, Retry):
        raise TypeError(f"retry must be a urllib3.util.Retry or an int, got {retry!r}")
    base = base if base is not None else RetryPolicy()
    total = retry.total
    if total is None:
        raise UnsupportedRetrySetting(
            "Retry(total=None) counts retries per kind only; retrysafe counts attempts per "
            "call: give total=N (policy attempts=N + 1)"
        )
    retries = 0 if total is False else int(total)
    if retries > 0:
        for name in ("connect", "read", "status", "other"):
            value = getattr(retry, name)
            if value is not None:
                raise UnsupportedRetrySetting(
                    f"Retry({name}={value!r}) has no equivalent: retrysafe counts attempts "
                    "per call (total) and decides per outcome whether a repeat is safe; "
                    f"drop {name}= and keep total="
                )
    if retry.allowed_methods is None:
        raise UnsupportedRetrySetting(
            "Retry(allowed_methods=None) would repeat any method; retrysafe repeats a POST "
            "or PATCH only under an idempotency key: list the idempotent methods, and use "
            "RetryAdapter(idempotency='auto') to key writes"
        )
    if not retry.respect_retry_after_header:
        raise UnsupportedRetrySetting(
            "Retry(respect_retry_after_header=False) has no equivalent: retrysafe always "
            "waits as long as Retry-After asks (cap it with RetryPolicy(max_retry_after=...))"
        )
    below_errors = sorted(status for status in retry.status_forcelist or () if status < 400)
    if below_errors:
        raise UnsupportedRetrySetting(
            f"Retry(status_forcelist=...) lists {below_errors}: retrysafe repeats only error "
            "statuses (400-599); drop them, and to repeat a success whose body says it "
            "failed, pass base=RetryPolicy(rules=...)"
        )
    # urllib3 waits min(backoff_max, backoff_factor * 2**n): a cap below the factor caps
    # every wait, which is base = cap = backoff_max here (never a cap raised to the base).
    backoff_cap = float(retry.backoff_max)
    backoff_base = min(float(retry.backoff_factor), backoff_cap)
    # urllib3 2.5 added retry_after_max; older ones had no cap.
    retry_after_max = getattr(retry, "retry_after_max", None)
    if base.hedge_after is not None:
        raise UnsupportedRetrySetting(
            "base= hedges (hedge_after is set), and neither urllib3's Retry nor the requests "
            "adapter sends hedged copies: pass a base without hedge_after"
        )
    return dataclasses.replace(
        base,
        attempts=retries + 1,
        # urllib3 also repeats 413, 429 and 503 that carry Retry-After. retrysafe waits out
        # a 429 and repeats a 503 (both refused before any work) with or without a
        # Retry-After; a 413 (too large) is never repeated: asking again cannot fix it.
        retry_statuses=frozenset(retry.status_forcelist or ()) | _WAITED_OUT_STATUSES,
        idempotent_methods=frozenset(retry.allowed_methods),
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
        max_retry_after=(
            float(retry_after_max) if retry_after_max is not None else base.max_retry_after
        ),
    )
