"""What a 429's Retry-After pauses: the call's dependency, by default the URL's origin.

Most APIs limit an account across the whole API, so one 429 means its neighbours
would get one too; an API limited per endpoint family is named narrower with
``dependency=`` (a string per call or client, or ``dependency_by_path``).
"""

from __future__ import annotations

import httpx
import pytest

import retrysafe
from retrysafe import Call, RetryPolicy
from retrysafe.decisions import Admission, AttemptPlan, StartCooldown
from retrysafe.governor.breaker import CLOSED_PERMIT
from retrysafe.testing import FakeClock


def api(seen: list[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.startswith("/search"):
            return httpx.Response(429, headers={"Retry-After": "120"})
        return httpx.Response(200)

    return httpx.MockTransport(handler)


def test_by_default_a_429_pauses_every_call_to_the_same_origin() -> None:
    seen: list[str] = []
    with retrysafe.Client(transport=api(seen), clock=FakeClock()) as client:
        with pytest.raises(retrysafe.RetryAfterTooLong):
            client.get("http://api.test/search?q=a")
        with pytest.raises(retrysafe.CooldownActive) as caught:
            client.get("http://api.test/orders/1")
    assert seen == ["/search"]
    assert caught.value.retry_after == pytest.approx(120)


def test_a_429_a_policy_takes_as_final_still_pauses_the_origin() -> None:
    """A policy that leaves 429 out of ``retry_statuses`` does not repeat the call, yet the
    server's wait still holds for the dependency's other calls: the limit is the account's,
    whatever one call site makes of it."""
    seen: list[str] = []
    policy = RetryPolicy(retry_statuses={500, 502, 503, 504})
    with retrysafe.Client(transport=api(seen), clock=FakeClock(), policy=policy) as client:
        with pytest.raises(retrysafe.RateLimited) as final:
            client.get("http://api.test/search?q=a")
        with pytest.raises(retrysafe.CooldownActive) as paused:
            client.get("http://api.test/orders/1")
    assert seen == ["/search"]
    assert (final.value.attempts, final.value.retry_after) == (1, 120)
    assert paused.value.retry_after == pytest.approx(120)


def test_dependency_by_path_keeps_a_429_to_its_own_endpoint_family() -> None:
    seen: list[str] = []
    with retrysafe.Client(
        transport=api(seen), clock=FakeClock(), dependency=retrysafe.dependency_by_path(1)
    ) as client:
        with pytest.raises(retrysafe.RetryAfterTooLong):
            client.get("http://api.test/search?q=a")
        assert client.get("http://api.test/orders/1").status_code == 200
        with pytest.raises(retrysafe.CooldownActive):
            client.get("http://api.test/search?q=b")
    assert seen == ["/search", "/orders/1"]


def test_a_per_call_dependency_names_a_narrower_group() -> None:
    seen: list[str] = []
    with retrysafe.Client(transport=api(seen), clock=FakeClock()) as client:
        with pytest.raises(retrysafe.RetryAfterTooLong):
            client.get("http://api.test/search?q=a", dependency="search")
        assert client.get("http://api.test/orders/1").status_code == 200


def test_dependency_by_path_names_origin_and_leading_segments() -> None:
    name = retrysafe.dependency_by_path(2)
    assert name(httpx.Request("GET", "https://api.test/v1/search/x?q=1")) == (
        "https://api.test:443/v1/search"
    )
    assert retrysafe.dependency_by_path(0)(httpx.Request("GET", "http://h/a")) == "http://h:80"


@pytest.mark.parametrize("path", ["/search", "/search/", "//search//", "/search//page"])
def test_dependency_by_path_ignores_empty_segments(path: str) -> None:
    name = retrysafe.dependency_by_path(2)
    expected = "https://api.test:443/search" + ("/page" if path.endswith("page") else "")
    assert name(httpx.Request("GET", "https://api.test" + path)) == expected


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_dependency_by_path_refuses_what_is_not_a_segment_count(bad: object) -> None:
    with pytest.raises(ValueError, match="whole number"):
        retrysafe.dependency_by_path(bad)  # type: ignore[arg-type]


def test_a_dependency_that_is_neither_name_nor_callable_is_refused_with_the_way_out() -> None:
    with pytest.raises(TypeError, match="dependency_by_path"):
        retrysafe.Client(dependency=42)  # type: ignore[arg-type]


def _cooldown_after_a_429(headers: dict[str, str]) -> StartCooldown:
    """The cooldown a first attempt's 429 with ``headers`` leaves (engine, fake clock)."""
    call = Call(httpx.Request("GET", "http://api.test/"), policy=RetryPolicy(), clock=FakeClock())
    plan = call.start_attempt(Admission(permit=CLOSED_PERMIT))
    assert isinstance(plan, AttemptPlan)
    call.attempt_returned(plan, httpx.Response(429, headers=headers, content=b"{}"))
    [cooldown] = [effect for effect in call.take_effects() if type(effect) is StartCooldown]
    return cooldown


def test_a_429_that_announces_its_limits_reset_pauses_for_the_longer_of_the_two() -> None:
    used_up = {"RateLimit-Remaining": "0", "RateLimit-Reset": "10"}
    # The reset comes later than the 429's own wait: the dependency pauses until it.
    assert _cooldown_after_a_429({"Retry-After": "2", **used_up}) == StartCooldown(10.0, True)
    # The 429's wait is the longer: that is the pause (as for any 429).
    later = _cooldown_after_a_429({"Retry-After": "30", **used_up})
    assert later.seconds >= 30.0
    assert not later.announced
