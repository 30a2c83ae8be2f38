"""CallOptions: what one request asks of retrysafe beyond its shell's settings.

They travel in the request's extensions, so a plain ``httpx.Client`` over a
:class:`~retrysafe.RetryTransport` can set a policy or dependency per request::

    client.get(url, extensions={"retrysafe": retrysafe.CallOptions(policy=...)})

(Users make these, so the module stays plain Python in the compiled build.)
"""

from __future__ import annotations

from typing import Final, NoReturn

from retrysafe.frozen_value import frozen_value
from retrysafe.policy import RetryPolicy

__all__ = ["DROP_IN_OPTIONS", "OPTIONS_EXTENSION", "CallOptions", "refuse_options"]

#: Request extension key under which per-call options travel (and, on the response, the report).
OPTIONS_EXTENSION: Final = "retrysafe"


@frozen_value
class CallOptions:
    """Per-call overrides carried in ``request.extensions["retrysafe"]``.

    ``stream``: the caller reads the body itself (``client.stream()``,
    ``send(stream=True)``): retries end at the response headers.
    """

    policy: RetryPolicy | None = None
    dependency: str | None = None
    stream: bool = False

    def __post_init__(self) -> None:
        if self.policy is not None and not isinstance(self.policy, RetryPolicy):
            raise TypeError(
                f"policy must be a retrysafe.RetryPolicy, got {type(self.policy).__name__}"
            )
        if self.dependency is not None and not isinstance(self.dependency, str):
            raise TypeError(
                "dependency for one call must be a name (str), e.g. dependency='search'; "
                f"got {type(self.dependency).__name__} (a callable naming requests goes on "
                "the transport or client)"
            )
        if self.dependency is not None and not self.dependency.strip():
            raise ValueError(
                "dependency for one call must be a name, e.g. dependency='search'; got "
                f"{self.dependency!r} (leave it out to group the call under its URL's origin)"
            )
        # (read as true or false, as httpx reads its own stream= flag)
        object.__setattr__(self, "stream", bool(self.stream))


#: A request without options came through a plain httpx client, which reads a success's
#: body only after the transport returns: the transport cannot know whether it will, so it
#: hands the body over as it arrives (retrysafe.Client always says which it is).
DROP_IN_OPTIONS: Final = CallOptions(stream=True)


def refuse_options(value: object) -> NoReturn:
    """Refuse ``value`` found under ``request.extensions["retrysafe"]``, where only a
    :class:`CallOptions` goes: a policy put there directly was silently ignored, and the
    call ran on the shell's policy, before this was checked."""
    from retrysafe.decisions import CallReport  # (loaded by now: a drive reads this)

    if isinstance(value, RetryPolicy):
        hint = "; wrap it: extensions={'retrysafe': retrysafe.CallOptions(policy=...)}"
    elif isinstance(value, CallReport):
        hint = (
            " (a response's report, from its extensions): build the request without the "
            "response's extensions, or with a CallOptions under this key"
        )
    else:
        hint = ", e.g. extensions={'retrysafe': retrysafe.CallOptions(policy=..., dependency=...)}"
    raise TypeError(
        'request.extensions["retrysafe"] must be a retrysafe.CallOptions, got '
        f"{type(value).__name__}{hint}"
    )
