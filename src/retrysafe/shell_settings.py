"""ShellSettings: everything a shell is configured with, validated once, as one frozen value.

Every shell (the httpx transports, the requests adapter, the aiohttp middleware)
builds one from its constructor's arguments, and the drive reads it on every
call. The checks run here, where a user's arguments first arrive, and say how to
fix what they refuse; the drive trusts the value it is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import httpx

from retrysafe.clock import Clock, checked_clock
from retrysafe.governor import Governor, GovernorSettings
from retrysafe.named_tuple import NamedTuple
from retrysafe.observe import EventHook, Observer
from retrysafe.policy import RetryPolicy
from retrysafe.request_facts import DependencyNamer

__all__ = ["ShellSettings"]

#: A header name: an HTTP token (RFC 9110, section 5.1).
_HEADER_NAME = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # (compiled on first use, by re's cache)


def _is_coroutine_function(hook: object) -> bool:
    """Whether ``hook`` (or the ``__call__`` of an object) is an ``async def``."""
    import inspect

    if inspect.iscoroutinefunction(hook):
        return True
    if isinstance(hook, type):  # (calling a class makes an instance: no coroutine)
        return False
    call = getattr(hook, "__call__", None)  # noqa: B004 - (an object with an async __call__)
    return inspect.iscoroutinefunction(call)


class ShellSettings(NamedTuple):
    """Everything a shell is configured with, as one frozen value for every layer.

    (A named tuple: ``import retrysafe`` defines it, and a frozen dataclass costs ten
    times as much to define.)
    """

    policy: RetryPolicy
    clock: Clock
    governor: Governor
    observer: Observer
    dependency: str | DependencyNamer | None = None
    raise_errors: bool = False
    deadline_header: str | None = None
    #: The jar of the retrysafe client this shell serves (None once the client is
    #: gone), which learns the cookies retried attempts' responses set, as it learns a
    #: final response's (:mod:`retrysafe.carried_cookies`); None for the drop-in.
    client_cookies: Callable[[], httpx.Cookies | None] | None = None
    #: The answer a call ends on goes back to the caller as the response, which the
    #: caller reads (a drop-in transport; the requests and aiohttp adapters with
    #: raise_on_status=False); False for retrysafe's clients and the adapters raising on
    #: status, which raise it as an error carrying its body (see ``Call``).
    returns_answers: bool = True

    @classmethod
    def build(
        cls,
        *,
        policy: RetryPolicy,
        clock: Clock | None,
        governor: Governor | None,
        hooks: Sequence[EventHook],
        dependency: str | DependencyNamer | None,
        raise_errors: bool,
        deadline_header: str | None,
    ) -> ShellSettings:
        """Validate the shell's arguments and fill in the defaults."""
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a retrysafe.RetryPolicy, got {type(policy).__name__}")
        if dependency is not None and not (isinstance(dependency, str) or callable(dependency)):
            raise TypeError(
                "dependency must be a name (str) or a callable naming each request, "
                f"e.g. retrysafe.dependency_by_path(1); got {type(dependency).__name__}"
            )
        if isinstance(dependency, str) and not dependency.strip():
            raise ValueError(
                "dependency must be a name, e.g. dependency='payments-api'; got "
                f"{dependency!r} (leave it out to group calls under each URL's origin)"
            )
        if governor is not None and not isinstance(governor, Governor):
            hint = (
                "wrap the settings: governor=retrysafe.Governor(settings)"
                if isinstance(governor, GovernorSettings)
                else "e.g. retrysafe.Governor(retrysafe.GovernorSettings(...))"
            )
            raise TypeError(
                f"governor must be a retrysafe.Governor, got {type(governor).__name__}; {hint}"
            )
        given = hooks
        if isinstance(hooks, Iterable) and not isinstance(hooks, (str, bytes)):
            hooks = tuple(hooks)  # (a generator is read once, here)
        if not isinstance(hooks, tuple) or not all(callable(hook) for hook in hooks):
            name = getattr(given, "__name__", "hook")
            one = f" (one hook goes in a list: hooks=[{name}])" if callable(given) else ""
            raise TypeError(
                "hooks must be a sequence of callables, each taking a retrysafe.RetryEvent, "
                f"e.g. hooks=[print]; got {given!r}{one}"
            )
        for hook in hooks:
            if _is_coroutine_function(hook):
                # (called, it would make a coroutine nobody awaits: never run, silently)
                raise TypeError(
                    f"hooks are called as plain functions, so an async one ({hook!r}) would "
                    "never run; give a plain function, which may hand the event to your "
                    "loop (loop.call_soon_threadsafe, or asyncio.create_task from a task)"
                )
        if deadline_header is not None and (
            not isinstance(deadline_header, str)
            or re.fullmatch(_HEADER_NAME, deadline_header) is None
        ):
            raise TypeError(
                "deadline_header must be a header name (letters, digits and !#$%&'*+-.^_`|~, "
                f"no spaces), e.g. deadline_header='Request-Timeout'; got {deadline_header!r}"
            )
        clock = checked_clock(clock)
        return cls(
            policy=policy,
            clock=clock,
            governor=governor if governor is not None else Governor(clock=clock),
            observer=Observer(hooks),
            dependency=dependency,
            raise_errors=bool(raise_errors),
            deadline_header=deadline_header,
        )
