"""The API docs in Chromium: Swagger UI draws every operation, offline-capable, under the site's CSP."""

import pytest

from .browser import CHROMIUM_ARGS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_docs_render_under_the_content_security_policy(chromium_path, live_server):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=live_server.url)
            problems, foreign = [], []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on(
                "request",
                lambda r: foreign.append(r.url) if not r.url.startswith((live_server.url, "data:")) else None,
            )
            # when the docs page is opened
            page.goto("/v1/docs")
            # then Swagger UI drew the operations from the schema, with nothing refused or fetched elsewhere
            expect(page.locator(".opblock-summary-path").first).to_be_visible(timeout=15_000)
            expect(page.get_by_text("/v1/categories/{slug}/top")).to_be_visible()
            assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems
            assert not foreign, foreign
        finally:
            browser.close()
