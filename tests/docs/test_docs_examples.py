"""Every python example on the documentation site runs, page by page.

One test per page under docs/: its python blocks run in order in one namespace, with
``chaos_url`` (the session's chaos server) and, when the page uses it, ``redis_url``
predefined. See tests/docs/doc_examples.py for the convention.
"""

from __future__ import annotations

import pytest
from doc_examples import TALLY, Page, missing_modules, pages, run_page

from retrysafe.chaos import ChaosServer

PAGES = pages()


def test_the_site_has_examples_to_run() -> None:
    assert PAGES, "no pages found under docs/"
    assert sum(len(page.examples) for page in PAGES) >= 20


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_page_examples_run(
    page: Page, chaos_server: ChaosServer, request: pytest.FixtureRequest
) -> None:
    missing = missing_modules(page)
    if missing:
        TALLY.pages_skipped.append(
            f"{page.name}: skipped, needs {', '.join(missing)} (not importable yet)"
        )
        pytest.skip(f"{page.name} needs {', '.join(missing)}, which is not importable here")
    namespace: dict[str, object] = {"__name__": "__docs__", "chaos_url": chaos_server.url}
    if page.needs_redis:
        namespace["redis_url"] = request.getfixturevalue("docs_redis_url")
    TALLY.not_run.extend(
        f"{page.name}:{example.line}: not run: {example.not_run}"
        for example in page.examples
        if example.not_run is not None
    )
    ran = run_page(page, namespace)
    TALLY.pages += 1
    TALLY.examples_run += ran
