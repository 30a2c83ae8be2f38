"""The secret values a ``retrysafe`` command line carries, found before anything parses it.

Every line the command writes about its input or its failure is scrubbed of them, so that
a typo (a header without its colon, a refused URL) never prints a token that was typed.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrysafe.redact import Redactor, is_secret_name, url_text_secrets

__all__ = ["argv_secrets", "header_secrets"]

_HEADER_FLAGS = ("-H", "--header")


def header_secrets(text: str) -> list[str]:
    """The secret parts of a ``-H`` argument: the value of a secret or malformed header,
    and every word of one without a colon but its first (the whole text if one word)."""
    name, colon, value = text.partition(":")
    if not colon:
        words = text.split()
        return [text.strip()] if len(words) == 1 else [" ".join(words[1:]), *words[1:]]
    if is_secret_name(name) or len(name.split()) != 1:
        return [value.strip(), *value.split()]
    return []


def argv_secrets(argv: Sequence[str]) -> Redactor:
    """A :class:`Redactor` for every secret value in ``argv``: headers and URLs."""
    secrets: list[str] = []
    for index, arg in enumerate(argv):
        previous = argv[index - 1] if index else ""
        if previous in _HEADER_FLAGS:
            secrets += header_secrets(arg)
        elif arg.startswith("--header="):
            secrets += header_secrets(arg.partition("=")[2])
        elif arg.startswith("-H") and len(arg) > 2:
            secrets += header_secrets(arg[2:])
        elif not arg.startswith("-"):
            secrets += url_text_secrets(arg)
    return Redactor(secrets)
