"""How the docs runner reads a page: which blocks run, which are skipped, and why."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from doc_examples import Page, missing_modules, parse_page, run_page

PAGE = """\
---
requires: [json, retrysafe]
title: A page
---

# A page

```python
total = 1
```

```text
total = 100  (output, never run)
```

```console
$ python -c "raise SystemExit(1)"
```

!!! note
    ```python
    total += 1
    ```

```python
# not run: needs a real API key
raise RuntimeError("must not run")
```

```py
total *= 10
```
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_python_blocks_run_in_order_in_one_namespace(tmp_path: Path) -> None:
    path = write(tmp_path, PAGE)
    page = parse_page(path, "page.md")
    namespace: dict[str, object] = {}
    assert run_page(page, namespace, path) == 3
    assert namespace["total"] == 20


def test_a_block_marked_not_run_is_kept_with_its_reason(tmp_path: Path) -> None:
    page = parse_page(write(tmp_path, PAGE), "page.md")
    assert [example.not_run for example in page.examples] == [
        None,
        None,
        "needs a real API key",
        None,
    ]


def test_front_matter_names_the_modules_a_page_requires(tmp_path: Path) -> None:
    page = parse_page(write(tmp_path, PAGE), "page.md")
    assert page.requires == ("json", "retrysafe")
    assert missing_modules(page) == []
    absent = Page("absent.md", (), requires=("retrysafe.not_a_module", "no_such_package.sub"))
    assert missing_modules(absent) == ["retrysafe.not_a_module", "no_such_package.sub"]


def test_a_failing_example_points_at_its_markdown_line(tmp_path: Path) -> None:
    path = write(tmp_path, "# Title\n\n```python\nx = 1\nraise ValueError('line 5')\n```\n")
    page = parse_page(path, "page.md")
    with pytest.raises(ValueError, match="line 5") as caught:
        run_page(page, {}, path)
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno) == (str(path), 5)


def test_redis_is_needed_only_where_running_code_mentions_it(tmp_path: Path) -> None:
    uses = parse_page(write(tmp_path, "```python\nprint(redis_url)\n```\n"), "a.md")
    skipped = parse_page(
        write(tmp_path, "```python\n# not run: sketch\nprint(redis_url)\n```\n"), "b.md"
    )
    assert uses.needs_redis
    assert not skipped.needs_redis


def test_an_unclosed_fence_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never closed"):
        parse_page(write(tmp_path, "```python\nx = 1\n"), "page.md")
