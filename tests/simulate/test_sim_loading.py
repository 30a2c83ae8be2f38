"""Loading ``--policy module:NAME`` settings that fail, and spreading jobs over processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from retrysafe.simulate import SettingsNotFound, load_policy
from retrysafe.simulate.parallel import run_jobs


def _write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Path:
    module = tmp_path / f"{name}.py"
    module.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return module


def test_a_failure_inside_a_function_of_the_module_names_the_line_that_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last line of the user's file in the traceback: the ``raise``, not the call of the
    function at module level."""
    source = (
        "import retrysafe\n"  # 1
        "\n"  # 2
        "def make():\n"  # 3
        "    raise ValueError('no such setting')\n"  # 4
        "\n"  # 5
        "POLICY = make()\n"  # 6
    )
    module = _write_module(tmp_path, monkeypatch, "raising_retry_settings", source)
    with pytest.raises(SettingsNotFound) as caught:
        load_policy("raising_retry_settings:POLICY")
    assert str(caught.value) == (
        f"cannot load 'raising_retry_settings' for policy: {module}, line 4: "
        "ValueError: no such setting"
    )


def test_a_failure_whose_message_has_several_lines_is_told_on_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = "raise RuntimeError('first line\\n   second line\\n')\n"
    module = _write_module(tmp_path, monkeypatch, "multiline_retry_settings", source)
    with pytest.raises(SettingsNotFound) as caught:
        load_policy("multiline_retry_settings:POLICY")
    assert str(caught.value) == (
        f"cannot load 'multiline_retry_settings' for policy: {module}, line 1: "
        "RuntimeError: first line second line"
    )


@pytest.mark.parametrize("spec", [":POLICY", "my_settings:", "my_settings.POLICY", ""])
def test_a_spec_without_module_or_name_is_refused_with_the_expected_form(spec: str) -> None:
    with pytest.raises(SettingsNotFound, match=r"^policy must be given as module:NAME "):
        load_policy(spec)


def test_jobs_that_cannot_go_to_another_process_run_here() -> None:
    """A lambda (a rule defined inside a function, say) cannot be pickled: still answered."""
    offset = 10
    assert run_jobs(lambda job: job + offset, [1, 2, 3], workers=2) == [11, 12, 13]
