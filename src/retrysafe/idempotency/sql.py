"""What the SQL stores share: the table's name and the columns a record is read from."""

from __future__ import annotations

import re

__all__ = ["DEFAULT_TABLE", "RECORD_COLUMNS", "check_table_name"]

#: The table both SQL stores use unless told otherwise.
DEFAULT_TABLE = "retrysafe_idempotency"

#: The columns :func:`retrysafe.idempotency.records.record_from_fields` decodes, in order.
RECORD_COLUMNS = "state, fingerprint, expires_at, status, headers, body"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_table_name(table: str) -> str:
    """Return ``table`` if it is a plain SQL identifier; it is spliced into statements."""
    if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
        raise ValueError(f"table must be a plain SQL identifier, got {table!r}")
    return table
