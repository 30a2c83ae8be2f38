"""Telemetry is opt-in: ``import retrysafe`` loads none of it, nor the packages it wraps."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("opentelemetry", "prometheus_client", "structlog", "retrysafe.telemetry")


def test_import_retrysafe_loads_no_telemetry() -> None:
    code = "import json, sys, retrysafe; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(result.stdout)
    assert "retrysafe" in loaded
    assert [name for name in loaded if name.startswith(OPTIONAL)] == []


def test_a_missing_extra_names_itself() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n    import retrysafe.telemetry.otel\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'retrysafe[otel]'" in result.stdout
