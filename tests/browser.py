"""What the browser tests share: Debian's Chromium under Playwright, a page on the live server, and
screenshots. The fixtures are registered in conftest.py; each browser module defines the `shop`
they run against."""

import shutil
from pathlib import Path

import pytest

SHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's Chromium and Playwright; either missing fails the tests, it does not skip them."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "Chromium is not installed: the browser tests need Debian's package (apt-get install -y chromium); "
            "Playwright's own browser download does not work here.",
            pytrace=False,
        )
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.fail("Playwright is not installed: pip install -r requirements/dev.txt", pytrace=False)
    return path


@pytest.fixture
def chromium(chromium_path, live_server, shop):
    """Chromium under Playwright, started after the data is written and stopped before it is flushed.

    While Playwright's event loop runs, Django refuses database calls from
    this thread (the live server answers from its own).
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, live_server, shop):
    """A desktop page on the live server; a script error on it fails the test."""
    context = chromium.new_context(viewport=DESKTOP, base_url=live_server.url)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors


def shot(page, name: str, *, full_page: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)
