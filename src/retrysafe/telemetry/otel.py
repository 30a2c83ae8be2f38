"""OpenTelemetry for retrysafe calls: spans and metrics on ``opentelemetry-api`` only.

Pass one :class:`OpenTelemetry` in a client's or transport's ``hooks``::

    client = retrysafe.Client(hooks=[OpenTelemetry()])

Each call gets a span (``retrysafe GET``, kind INTERNAL) and each attempt a child span
(``GET``, kind CLIENT) with the HTTP client conventions: ``http.request.method``,
``server.address``, ``server.port``, ``url.full`` (secrets redacted, and credentials as
``REDACTED:REDACTED``), ``http.response.status_code``, ``error.type`` and, on a resend,
``http.request.resend_count``; plus ``retrysafe.attempt``, ``retrysafe.outcome``, and on
a failed attempt that is retried a ``retrysafe.retry`` event and the
``retrysafe.retry.wait`` attribute; on the call span, a wait load protection added
before an attempt is a ``retrysafe.held`` event. The trace context (``traceparent``...) sent with
each attempt is that attempt's span; each hedged copy is an attempt of its own (its own
span and ``traceparent``; a copy that lost ends with ``retrysafe.outcome =
hedge_lost``).

Beside ``opentelemetry-instrumentation-httpx`` nothing is counted twice: while an
attempt is sent, retrysafe marks the context with OpenTelemetry's standard
"suppress HTTP instrumentation" key, so the httpx instrumentation (which wraps the
inner transport retrysafe sends through) makes no second span for the same
request, and retrysafe's attempt span, which knows it is a resend, is the one.

Without an SDK (no global provider set, none given) the hook says it is not
listening: calls then build no routine events and open no spans, so the hook
costs a check per call. Metrics (through the same API): ``retrysafe.attempts``
(every attempt, a hedged copy too: one that lost has outcome ``hedge_lost``; one that never
left, such as a ``connect_error``, counts under its outcome),
``retrysafe.retries``, ``retrysafe.refusals``, ``retrysafe.hedges`` (counters),
``retrysafe.retry.wait``, ``retrysafe.held.wait`` and ``retrysafe.call.duration``
(histograms),
``retrysafe.circuit.state`` (a gauge: 0 closed, 1 half open, 2 open).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import httpx

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "retrysafe.telemetry.otel needs OpenTelemetry's API: pip install 'retrysafe[otel]'"
    ) from exc

from retrysafe.governor import Governor
from retrysafe.observe import FIRST_COPY, CallTrace, RetryEvent, logger
from retrysafe.redact import REDACTED
from retrysafe.telemetry.vocabulary import (
    BREAKER_STATE_VALUES,
    LOCAL_REFUSAL_REASONS,
    breaker_state_after,
    known_method,
)

__all__ = ["SECONDS_BUCKETS", "OpenTelemetry"]

_VERSION = "0.1.0"
#: The key every OpenTelemetry HTTP client instrumentation checks before making a span.
_SUPPRESS_HTTP: Any = getattr(otel_context, "_SUPPRESS_HTTP_INSTRUMENTATION_KEY", None)
#: The key that switches every instrumentation off for a block of code.
_SUPPRESS_ALL: Any = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
#: The outcome of a hedged copy cancelled because another copy answered first.
_HEDGE_LOST = "hedge_lost"
#: The duration histograms' bucket boundaries (seconds): the HTTP conventions' advice for
#: request durations, then on to a call's 30 s deadline and past it.
SECONDS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 60.0,
)  # fmt: skip


def _seconds_histogram(meter: metrics.Meter, name: str, description: str) -> Any:
    """A histogram of seconds, with :data:`SECONDS_BUCKETS` advised where the API takes
    advice (opentelemetry-api 1.30 and later; an older one, or a meter of another make,
    gets the SDK's own boundaries)."""
    try:
        return meter.create_histogram(
            name,
            unit="s",
            description=description,
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
    except TypeError:
        return meter.create_histogram(name, unit="s", description=description)


def _globals_unset() -> bool:
    """Whether neither a global tracer provider nor a global meter provider is set.

    The API keeps them in module attributes, None until set; reading those is a
    fraction of the cost of its getters (which look at the environment each time
    nothing is set). An API without them is asked through the public getters.
    """
    tracer_provider = getattr(trace, "_TRACER_PROVIDER", _ASK)
    meter_provider = getattr(_metrics_state, "_METER_PROVIDER", _ASK)
    if tracer_provider is _ASK or meter_provider is _ASK:
        return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) and (
            type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
        )
    return tracer_provider is None and meter_provider is None


_ASK = object()
try:
    from opentelemetry.metrics import _internal as _metrics_state
except ImportError:  # pragma: no cover - another API version: the public getters are used
    _metrics_state = None  # type: ignore[assignment]


class OpenTelemetry:
    """A hook that traces every call (a span per call, one per attempt) and counts
    attempts, retries, refusals and breaker states through the OpenTelemetry API.

    Args:
        tracer_provider: where spans go; default the global one.
        meter_provider: where metrics go; default the global one.
        propagate: put each attempt's trace context on its request (through the
            globally configured propagator, W3C ``traceparent`` by default).
        suppress_http_instrumentation: while an attempt is sent, tell other HTTP
            client instrumentations (``opentelemetry-instrumentation-httpx``) not to
            make a span of their own for it: retrysafe's attempt span is that span.
        governor: the load protection whose breakers ``retrysafe.circuit.state`` reads at
            each collection, for every dependency. Without it the gauge holds the last
            state a call saw, and a breaker nobody calls stays "open" there after it has
            gone half open.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        propagate: bool = True,
        suppress_http_instrumentation: bool = True,
        governor: Governor | None = None,
    ) -> None:
        if governor is not None and not isinstance(governor, Governor):
            raise TypeError(f"governor must be a retrysafe.Governor, got {type(governor).__name__}")
        #: The governor whose breakers the state gauge reads (see the class docstring).
        self.governor = governor
        if tracer_provider is not None and not callable(
            getattr(tracer_provider, "get_tracer", None)
        ):
            raise TypeError(
                "tracer_provider must be an OpenTelemetry TracerProvider (e.g. the SDK's "
                f"opentelemetry.sdk.trace.TracerProvider()), got {type(tracer_provider).__name__}"
            )
        if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
            raise TypeError(
                "meter_provider must be an OpenTelemetry MeterProvider (e.g. the SDK's "
                f"opentelemetry.sdk.metrics.MeterProvider()), got {type(meter_provider).__name__}"
            )
        #: A provider was given, or a global one has been seen: spans and metrics have
        #: somewhere to go (a global provider can be set once, never unset).
        self._sdk_seen = tracer_provider is not None or meter_provider is not None
        # A provider named by environment variable is loaded now, by the API's getters.
        trace.get_tracer_provider()
        metrics.get_meter_provider()
        self._tracer = trace.get_tracer("retrysafe", _VERSION, tracer_provider)
        meter = metrics.get_meter("retrysafe", _VERSION, meter_provider)
        self.propagate = propagate
        self.suppress_http_instrumentation = suppress_http_instrumentation and (
            _SUPPRESS_HTTP is not None
        )
        self._attempts = meter.create_counter(
            "retrysafe.attempts",
            unit="{attempt}",
            description="Attempts, by outcome (one that never left too: connect_error...).",
        )
        self._retries = meter.create_counter(
            "retrysafe.retries", unit="{retry}", description="Retries decided, by outcome."
        )
        self._hedge_copies = meter.create_counter(
            "retrysafe.hedges",
            unit="{copy}",
            description="Hedged copies, by what became of each: sent, won, lost, refused.",
        )
        self._refusals = meter.create_counter(
            "retrysafe.refusals",
            unit="{refusal}",
            description="Calls retrysafe's own load protection stopped, by reason.",
        )
        # (bucket boundaries in seconds, as the HTTP conventions advise for their durations,
        # out to a whole call's 30 s deadline: the SDK's default ones are for milliseconds,
        # and put every call in the first)
        self._waits = _seconds_histogram(meter, "retrysafe.retry.wait", "Waits before a retry.")
        self._held = _seconds_histogram(
            meter,
            "retrysafe.held.wait",
            "Waits load protection added before an attempt: cooldown, pacing.",
        )
        self._durations = _seconds_histogram(
            meter, "retrysafe.call.duration", "Whole calls, retries included."
        )
        self._bodies = meter.create_counter(
            "retrysafe.stream.bodies",
            unit="{body}",
            description="Streamed calls' bodies, by how each ended: complete, broken, abandoned.",
        )
        self._stream_durations = _seconds_histogram(
            meter,
            "retrysafe.stream.duration",
            "Streamed calls, from their start to their body's end.",
        )
        #: The last known breaker state of each dependency (gauge value).
        self._breakers: dict[str, int] = {}
        meter.create_observable_gauge(
            "retrysafe.circuit.state",
            callbacks=[self._observe_breakers],
            unit="1",
            description="Circuit breaker state per dependency: 0 closed, 1 half open, 2 open.",
        )

    @property
    def listening(self) -> bool:
        """False while neither spans nor metrics can go anywhere (no SDK configured and
        no provider given): calls then build no routine events and open no spans.
        Read once per call, so an SDK configured later is picked up by the next call."""
        if self._sdk_seen:
            return True
        if _globals_unset():
            return False
        self._sdk_seen = True  # a global provider, once set, stays set
        return True

    # -- metrics: every event -----------------------------------------------------------

    def __call__(self, event: RetryEvent) -> None:
        """Count ``event`` (any call's)."""
        kind = event.kind
        dependency = event.dependency
        if kind == "attempt":
            self._attempts.add(
                1, {"retrysafe.dependency": dependency, "retrysafe.outcome": event.outcome}
            )
        elif kind == "retry":
            labels = {"retrysafe.dependency": dependency, "retrysafe.outcome": event.outcome}
            self._retries.add(1, labels)
            self._waits.record(event.wait, {"retrysafe.dependency": dependency})
        elif kind == "held":
            self._held.record(
                event.wait, {"retrysafe.dependency": dependency, "retrysafe.reason": event.reason}
            )
        elif kind == "success" or kind == "failure" or kind == "interrupted":
            self._durations.record(
                event.elapsed,
                {
                    "retrysafe.dependency": dependency,
                    "http.request.method": known_method(event.method),
                    "retrysafe.result": kind,
                    "retrysafe.reason": event.reason,
                },
            )
            if kind == "failure" and event.reason in LOCAL_REFUSAL_REASONS:
                self._refusals.add(
                    1, {"retrysafe.dependency": dependency, "retrysafe.reason": event.reason}
                )
        elif kind == "circuit":
            state = breaker_state_after(event.transition)
            if state is not None:
                self._breakers[dependency] = state
        elif kind == "hedge":
            if event.reason != FIRST_COPY:  # (hedged copies: the raced attempt is none)
                self._hedge_copies.add(
                    1, {"retrysafe.dependency": dependency, "retrysafe.outcome": event.outcome}
                )
        elif kind == "body":
            labels = {"retrysafe.dependency": dependency, "retrysafe.outcome": event.outcome}
            self._bodies.add(1, labels)
            self._stream_durations.record(event.elapsed, labels)

    def _observe_breakers(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        if self.governor is not None:
            # (as the next call finds it: an open period that ended reads as half open,
            # and a fleet's open breaker as open, whatever this process's own says)
            observed = []
            for dependency, guard in self.governor.guards():
                state = guard.breaker_state()
                if state is not None:
                    observed.append(
                        metrics.Observation(
                            BREAKER_STATE_VALUES[state], {"retrysafe.dependency": dependency}
                        )
                    )
            return observed
        return [
            metrics.Observation(state, {"retrysafe.dependency": dependency})
            for dependency, state in list(self._breakers.items())
        ]

    # -- spans: every call --------------------------------------------------------------

    def start_call(self, request: httpx.Request, *, dependency: str, url: str) -> CallTrace | None:
        """Open the call's span; the drive loop then reports its attempts and events.

        With no SDK configured the API hands out a span that records nothing and
        has no trace to propagate: the call is then not followed at all (None: no
        attempt spans, no context to enter, no header to add).
        """
        if _SUPPRESS_ALL is not None and otel_context.get_value(_SUPPRESS_ALL):
            return None  # inside suppress_instrumentation() (an exporter's own requests...)
        method = known_method(request.method)
        url_parts = request.url
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "server.address": url_parts.host,
            "server.port": url_parts.port or (443 if url_parts.scheme == "https" else 80),
            "url.full": _without_credentials(url),
        }
        if method == "_OTHER":
            # (the conventions: the method as sent kept apart, and the span named HTTP)
            attributes["http.request.method_original"] = request.method
            method = "HTTP"
        span = self._tracer.start_span(
            f"retrysafe {method}",
            kind=trace.SpanKind.INTERNAL,
            attributes={**attributes, "retrysafe.dependency": dependency},
        )
        if not span.is_recording() and not span.get_span_context().is_valid:
            return None
        return _CallSpans(self, span, method, attributes)

    def __repr__(self) -> str:
        return f"OpenTelemetry(propagate={self.propagate})"


def _without_credentials(url: str) -> str:
    """``url`` (its secrets already redacted) as the HTTP conventions ask ``url.full`` to
    be: credentials in it, a username included, and a secret query value, each replaced
    by ``REDACTED`` (the logs' ``[REDACTED]``, as the conventions spell it)."""
    url = url.replace(f"={REDACTED}", "=REDACTED")
    if "@" not in url:
        return url
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return url
    if not parsed.userinfo:
        return url
    return str(parsed.copy_with(username="REDACTED", password="REDACTED"))


def _now() -> int:
    return time.time_ns()


class _CallSpans:
    """The spans of one call: the call's own, and one per attempt.

    An attempt's span is entered (made the current context) while the attempt is
    sent, and left when its ``attempt`` event arrives; it ends at that moment, after
    the retry or end event that follows has added what the call decided. A hedged
    call has several attempts (copies) in flight at once: each copy gets its own
    span and trace context, entered by the caller when the copy starts (the shell
    runs each copy in a copy of the caller's context taken then); the caller's
    context holds one entered attempt at most, so leaving it always restores the
    caller's own context. A context is only ever left on the thread that entered it.
    Instrumentation must never fail a call: every failure here is logged and swallowed.
    """

    __slots__ = (
        "_attributes",
        "_body_follows",
        "_call",
        "_ended_at",
        "_hedges",
        "_interrupted_by",
        "_method",
        "_owner",
        "_spans",
        "_token",
        "_token_thread",
    )

    def __init__(
        self, owner: OpenTelemetry, call: trace.Span, method: str, attributes: dict[str, Any]
    ) -> None:
        self._owner = owner
        self._call = call
        self._method = method
        self._attributes = attributes
        #: The attempt spans not yet ended, by attempt number.
        self._spans: dict[int, trace.Span] = {}
        #: When each attempt whose span is still open ended (its span ends then).
        self._ended_at: dict[int, int] = {}
        self._token: Any = None
        self._token_thread = 0
        #: Hedged copies sent so far (see RetryPolicy.hedge_after).
        self._hedges = 0
        #: The call streams: a success's span ends with its body (a ``body`` event).
        self._body_follows = False
        #: What an attempt still open as the call closes is marked with (``error.type``):
        #: the exception that interrupted the call (an ``interrupted`` event), when told.
        self._interrupted_by = "cancelled"

    def body_follows(self) -> None:
        """The call streams: if it succeeds, its span ends when its body does."""
        self._body_follows = True

    def attempt_starting(self, number: int, request: httpx.Request) -> None:
        try:
            self._end_attempts()
            owner = self._owner
            attributes = dict(self._attributes)
            attributes["retrysafe.attempt"] = number
            if number > 1:
                attributes["http.request.resend_count"] = number - 1
            span = owner._tracer.start_span(
                self._method,
                context=trace.set_span_in_context(self._call),
                kind=trace.SpanKind.CLIENT,
                attributes=attributes,
            )
            self._spans[number] = span
            context = trace.set_span_in_context(span)
            if owner.propagate:
                propagate.inject(request.headers, context=context)
            if owner.suppress_http_instrumentation:
                context = otel_context.set_value(_SUPPRESS_HTTP, True, context)
            self._leave()  # an earlier copy's context: that copy runs in its own already
            self._token = otel_context.attach(context)
            self._token_thread = threading.get_ident()
        except Exception:
            logger.exception("retrysafe OpenTelemetry instrument failed; the call goes on")

    def event(self, event: RetryEvent) -> None:
        try:
            kind = event.kind
            if kind == "attempt":
                self._attempt_ended(event)
            elif kind == "retry":
                span = self._spans.get(event.attempt) or self._call
                span.set_attribute("retrysafe.retry.wait", event.wait)
                span.add_event(
                    "retrysafe.retry",
                    {"retrysafe.outcome": event.outcome, "retrysafe.retry.wait": event.wait},
                )
                self._end_attempts()
            elif kind == "held":
                self._call.add_event(
                    "retrysafe.held",
                    {
                        "retrysafe.reason": event.reason,
                        "retrysafe.held.wait": event.wait,
                        "retrysafe.attempt": event.attempt,
                    },
                )
            elif kind == "success" or kind == "failure":
                self._end_attempts()
                self._call_ended(event)
            elif kind == "interrupted":
                self._interrupted_by = event.exception or "_OTHER"
                self._call_interrupted(event)
            elif kind == "body":
                self._body_ended(event)
            elif kind == "circuit":
                self._call.add_event(
                    "retrysafe.circuit", {"retrysafe.transition": event.transition}
                )
            elif kind == "hedge":
                # Each copy has its attempt span; the call span counts the copies and
                # names the winner.
                attributes: dict[str, str | int] = {
                    "retrysafe.hedge.copy": event.attempt,
                    "retrysafe.hedge.outcome": event.outcome,
                }
                if event.reason:
                    attributes["retrysafe.hedge.reason"] = event.reason
                self._call.add_event("retrysafe.hedge", attributes)
                if event.outcome == "sent":
                    self._hedges += 1
                    self._call.set_attribute("retrysafe.hedges", self._hedges)
                elif event.outcome == "won":
                    self._call.set_attribute("retrysafe.hedge.winner", event.attempt)
        except Exception:
            logger.exception("retrysafe OpenTelemetry instrument failed; the call goes on")

    def _attempt_ended(self, event: RetryEvent) -> None:
        self._leave()
        span = self._spans.get(event.attempt)
        if span is None:
            return
        self._ended_at[event.attempt] = _now()
        span.set_attribute("retrysafe.outcome", event.outcome)
        if event.outcome == _HEDGE_LOST:
            # Cancelled because another copy answered first: not an error, and nothing
            # the call decides later is about it.
            span.add_event("retrysafe.hedge.lost")
            self._end_attempt(event.attempt)
            return
        status = event.status
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        error_type = event.exception or (
            str(status) if status is not None and status >= 400 else None
        )
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            if event.exception is not None:
                span.add_event("exception", {"exception.type": event.exception})
            span.set_status(trace.StatusCode.ERROR, event.outcome)

    def _call_ended(self, event: RetryEvent) -> None:
        span = self._call
        span.set_attribute("retrysafe.attempts", event.attempt)
        span.set_attribute("retrysafe.outcome", event.outcome)
        if event.status is not None:
            span.set_attribute("http.response.status_code", event.status)
        if event.kind == "failure":
            span.set_attribute("retrysafe.reason", event.reason)
            span.set_attribute("error.type", event.error or "_OTHER")
            span.set_status(trace.StatusCode.ERROR, f"{event.error}: {event.reason}")
        elif self._body_follows:
            return  # (a streamed success: the span goes on to the body's end)
        span.end()

    def _call_interrupted(self, event: RetryEvent) -> None:
        """The call ended on an exception not its own (its task cancelled): an error,
        named by the exception that reached the call (``asyncio.timeout`` then hands the
        caller a TimeoutError). Its attempts still open end as it closes."""
        span = self._call
        span.set_attribute("retrysafe.attempts", event.attempt)
        span.set_attribute("error.type", self._interrupted_by)
        span.add_event("exception", {"exception.type": self._interrupted_by})
        span.set_status(trace.StatusCode.ERROR, f"the call was interrupted: {self._interrupted_by}")

    def _body_ended(self, event: RetryEvent) -> None:
        """A streamed success's body ended: so does the call's span, an error if the body
        broke off (the caller got the exception)."""
        span = self._call
        span.set_attribute("retrysafe.body.outcome", event.outcome)
        if event.outcome == "broken":
            error_type = event.exception or "_OTHER"
            span.set_attribute("error.type", error_type)
            span.add_event("exception", {"exception.type": error_type})
            span.set_status(trace.StatusCode.ERROR, f"the body broke off: {error_type}")
        span.end()

    def _end_attempt(self, number: int) -> None:
        span = self._spans.pop(number, None)
        ended_at = self._ended_at.pop(number, None)
        if span is not None:
            span.end(end_time=ended_at)

    def _end_attempts(self) -> None:
        """End the span of every attempt that has ended (copies still in flight stay)."""
        for number in list(self._ended_at):
            self._end_attempt(number)

    def _leave(self) -> None:
        """Leave the attempt context the caller entered, on the thread that entered it
        (elsewhere it cannot be left: a context is per thread, and per task)."""
        token, self._token = self._token, None
        if token is not None:
            if threading.get_ident() == self._token_thread:
                otel_context.detach(token)
            else:  # pragma: no cover - a shell's bug: say so rather than corrupt a context
                logger.warning(
                    "retrysafe OpenTelemetry: an attempt's context was not left, since its "
                    "end was reported on another thread than the one that entered it"
                )

    def close(self) -> None:
        """The call is over: end whatever is still open (a call cancelled mid-attempt)."""
        try:
            self._leave()
            for number, span in list(self._spans.items()):
                if number not in self._ended_at:
                    span.set_attribute("error.type", self._interrupted_by)
                    span.set_status(trace.StatusCode.ERROR, "the attempt was interrupted")
                self._end_attempt(number)
            if self._call.is_recording():
                self._call.end()
        except Exception:
            logger.exception("retrysafe OpenTelemetry instrument failed; the call goes on")
