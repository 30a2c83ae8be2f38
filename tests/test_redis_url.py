"""A Redis URL with a typo is refused as the fleet or the store is made, saying what to
fix, and never quoting the password.

redis-py dropped a database that is not a number without a word (and used database 0),
and both owners answered a port that is not one with advice about the password
(trial103).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from retrysafe.fleet import RedisFleet
from retrysafe.idempotency import RedisStore

OWNERS: dict[str, Callable[[str], object]] = {"RedisFleet": RedisFleet, "RedisStore": RedisStore}


@pytest.fixture(params=sorted(OWNERS))
def owner(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def refused(owner: str, url: str) -> str:
    """The message ``owner`` refuses ``url`` with (the password, hunter2, kept out)."""
    with pytest.raises(ValueError, match=r"^\w+\(url\): ") as caught:
        OWNERS[owner](url)
    message = str(caught.value)
    assert "hunter2" not in message
    assert caught.value.__cause__ is None
    assert message.startswith(f"{owner}(url): ")
    return message


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@127.0.0.1:notaport/0",
        "redis://:hunter2@127.0.0.1:99999/0",
        "rediss://user:hunter2@127.0.0.1:6379x",
    ],
)
def test_a_port_that_is_not_one_is_named_as_the_port(owner: str, url: str) -> None:
    message = refused(owner, url)
    assert "the port in the URL is not a number from 0 to 65535" in message
    assert "notaport" not in message


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2#x@127.0.0.1:6379/0",  # '#' starts the fragment
        "redis://:hunter2/x@127.0.0.1:6379/0",  # '/' starts the path
        "redis://:hunter2?x@127.0.0.1:6379/0",  # '?' starts the query
    ],
)
def test_a_password_that_ends_the_host_early_is_told_to_be_percent_encoded(
    owner: str, url: str
) -> None:
    message = refused(owner, url)
    assert "percent-encode special characters in the password" in message
    assert "port" not in message


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@127.0.0.1:6379/zz",
        "redis://:hunter2@127.0.0.1:6379/0/1",  # (redis-py read it as database 01)
        "redis://:hunter2@127.0.0.1:6379/²",
    ],
)
def test_a_database_that_is_not_a_number_is_refused_not_dropped(owner: str, url: str) -> None:
    message = refused(owner, url)
    assert "the database in the URL's path must be a number" in message
    assert "redis-py would use database 0 instead" in message


def test_a_db_query_that_is_not_a_number_is_refused(owner: str) -> None:
    assert "db= must be a number" in refused(owner, "redis://:hunter2@127.0.0.1:6379?db=one")


def test_a_url_without_a_scheme_names_the_schemes(owner: str) -> None:
    message = refused(owner, ":hunter2@127.0.0.1:6379")
    assert "the URL needs a scheme, one of redis://, rediss://, unix://" in message


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379",
        "redis://127.0.0.1:6379/",
        "redis://:p%23ss@127.0.0.1:6379/15",
        "redis://user:p:ss@127.0.0.1/%31",  # (a ':' in the password needs no encoding)
        "rediss://127.0.0.1:6380/0?db=2",
        "unix:///tmp/redis.sock?db=1",
        "unix:///run/redis@6379.sock",  # (an '@' in a socket's path is the path's)
        "redis://[::1]:6379/0",
    ],
)
def test_well_formed_urls_are_accepted(owner: str, url: str) -> None:
    made = OWNERS[owner](url)  # (neither connects until it is used)
    close = getattr(made, "close", None)
    if owner == "RedisFleet" and close is not None:
        close()
