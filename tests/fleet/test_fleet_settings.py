"""FleetSettings refuse what would break the fleet's promises; importing costs nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retrysafe.fleet import FleetSettings, RedisFleet


def test_the_defaults_are_valid() -> None:
    settings = FleetSettings()
    assert settings.quorum == 3
    assert settings.timeout == 0.005


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"quorum": 1}, "FleetSettings.quorum must be an int >= 2 (one process's word"),
        ({"quorum_share": 0}, "FleetSettings.quorum_share must be > 0"),
        ({"quorum_share": 1.5}, "FleetSettings.quorum_share must be <= 1"),
        ({"vote_after": 0}, "FleetSettings.vote_after must be an int >= 1"),
        ({"timeout": 0}, "FleetSettings.timeout must be > 0 seconds"),
        ({"refresh_every": float("inf")}, "FleetSettings.refresh_every must be finite"),
        ({"alive_for": 0.1, "refresh_every": 0.2}, "FleetSettings.alive_for must be longer"),
        # (one heartbeat per refresh: alive for exactly one period would count it gone)
        ({"alive_for": 0.5, "refresh_every": 0.5}, "FleetSettings.alive_for must be longer"),
        ({"background_timeout": 0}, "FleetSettings.background_timeout must be > 0 seconds"),
        ({"background_timeout": -1.0}, "FleetSettings.background_timeout must be > 0 seconds"),
        ({"background_timeout": float("inf")}, "FleetSettings.background_timeout must be finite"),
    ],
)
def test_bad_settings_say_what_to_do(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        FleetSettings(**fields)  # type: ignore[arg-type]


def test_a_quorum_share_of_the_whole_fleet_is_allowed() -> None:
    assert FleetSettings(quorum_share=1).quorum_share == 1


def test_a_fleet_needs_a_url_and_a_namespace() -> None:
    with pytest.raises(TypeError, match="url must be a redis URL"):
        RedisFleet("")
    with pytest.raises(ValueError, match="namespace"):
        RedisFleet("redis://127.0.0.1:9/0", namespace="")


def test_the_fleet_breakers_message_names_the_settings_that_govern_it_with_values() -> None:
    from retrysafe.governor.fleet_guard import explain_fleet_open

    settings = FleetSettings(quorum=2, quorum_share=0.25, vote_after=3)
    with RedisFleet("redis://127.0.0.1:9/0", settings=settings) as fleet:  # (never connects)
        message = explain_fleet_open(5.0, fleet.quorum_rule)
    assert "open for 5.0 s more" in message
    assert "FleetSettings(quorum=2, quorum_share=0.25, vote_after=3)" in message


def test_import_retrysafe_loads_neither_redis_nor_the_fleet() -> None:
    code = (
        "import json, sys, retrysafe, retrysafe.fleet\n"
        "from retrysafe.governor import Governor\n"
        "Governor().guard('api')\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", code])))
    assert "redis" not in loaded
    assert "retrysafe.fleet.redis_fleet" not in loaded
    assert "retrysafe.governor.fleet_guard" not in loaded
