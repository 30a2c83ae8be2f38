"""The pytest plugin as a user's suite sees it: its keys, and its fixtures' scopes."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from retrysafe.testing.pytest_plugin import unique_key


def test_a_key_reads_as_the_test_it_names_then_a_random_suffix() -> None:
    key = unique_key("test_x[param/with spaces?]")
    assert re.fullmatch(r"test_x-param-with-spaces-[0-9a-f]{12}", key), key


def test_a_name_with_nothing_url_safe_in_it_still_makes_a_readable_key() -> None:
    key = unique_key("[?/ ]")
    assert re.fullmatch(r"test-[0-9a-f]{12}", key), key


def test_a_long_name_is_cut_so_keys_stay_short() -> None:
    key = unique_key("test_" + "a" * 200)
    readable, _, suffix = key.rpartition("-")
    assert readable == ("test_" + "a" * 200)[:48]
    assert len(suffix) == 12


def test_keys_made_for_the_same_test_do_not_collide() -> None:
    assert len({unique_key("test_same") for _ in range(2000)}) == 2000


def test_the_fixtures_in_a_users_suite_of_two_modules(tmp_path: Path) -> None:
    """One chaos server for the whole session, a key per test, and testing mode put back
    as it was after each test that asked for ``retrysafe_testing``."""
    ports = tmp_path / "ports.txt"
    for module in ("first", "second"):
        (tmp_path / f"test_{module}.py").write_text(
            textwrap.dedent(
                f"""
                import pathlib

                from retrysafe.testing import is_testing, set_testing, switch

                def test_server_{module}(chaos_server, chaos):
                    with pathlib.Path({str(ports)!r}).open("a") as out:
                        out.write(f"{{chaos_server.port}}\\n")
                    assert chaos.key.startswith("test_server_{module}-")

                def test_two_attempts_{module}():
                    set_testing(True, attempts=2)

                def test_fixture_{module}(retrysafe_testing):
                    assert switch.active.attempts == 1
                    set_testing(True, attempts=3)

                def test_after_the_fixture_{module}():
                    assert switch.active.attempts == 2
                    set_testing(False)
                    assert not is_testing()
                """
            )
        )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout
    first, second = ports.read_text().split()
    assert first == second  # the session's one server, not one per module
