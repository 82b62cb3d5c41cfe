"""Pages a person is glad to use: no serious or critical accessibility violation (axe-core in
Chromium), a phone's width without sideways scrolling, and sections that keep apart.

Same set-up as tests/test_browser_history.py (the demo, small, with its history). axe-core is
vendored in tests/vendor/ (see its README) so the tests need no network; it is injected from a
file, which the site's Content-Security-Policy (no inline scripts) would refuse, so the context
bypasses the CSP for the check.
"""

import io
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from rankings.engine.tick import tick
from rankings.operations.demo import DemoShape, demo_seed
from rankings.operations.first_run import demo_history

from .browser import DESKTOP, PHONE, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
SMALL = DemoShape(sales=3000, days=3, categories=3, products=60, views_per_sale=1, wishes_per_sale=0.5)
PAGES = {
    "home": "/",
    "category": "/c/cat0/?window=1d",
    "movers": "/c/cat0/movers/?window=1d",
    "new releases": "/c/cat0/new/",
    "product": "{best}",
}
ADMIN_STATUS = "/admin/rankings/rankingversion/status/"
PASSWORD = "a long enough password"


@pytest.fixture
def shop():
    """The demo's shape, small, with its history; the best seller of cat0 and an administrator."""
    demo_seed(shape=SMALL, seed=5)
    tick(now=timezone.now())
    demo_history(io.StringIO())
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)


def best_seller(page) -> str:
    """The address of the best seller's page, as the category page links it."""
    page.goto("/c/cat0/?window=1d")
    return page.locator("table.board tbody tr").first.get_by_role("link").first.get_attribute("href")


def serious_violations(page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[node['target'] for node in v['nodes']][:3]}"
        for v in violations
        if v["impact"] in ("serious", "critical")
    ]


def badge_gaps(page) -> list[float]:
    """How far each list of badges ends above the heading that follows it, in pixels."""
    return page.evaluate(
        """() => [...document.querySelectorAll('ul.badges')].map(list => {
              let next = list.nextElementSibling;
              while (next && !/^H[1-6]$/.test(next.tagName)) next = next.nextElementSibling;
              next = next || list.closest('section').nextElementSibling.querySelector('h2');
              return next.getBoundingClientRect().top - list.getBoundingClientRect().bottom;
           })"""
    )


def log_in(page) -> None:
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def test_the_pages_have_no_serious_accessibility_violation(chromium, live_server, shop):
    context = chromium.new_context(viewport=DESKTOP, base_url=live_server.url, bypass_csp=True)
    page = context.new_page()
    try:
        best = best_seller(page)
        found = {}
        for name, path in PAGES.items():
            page.goto(path.format(best=best))
            found[name] = serious_violations(page)
        log_in(page)
        page.goto(ADMIN_STATUS)
        found["admin status"] = serious_violations(page)
        # it reloads itself only when asked to, and can be told to stop
        page.get_by_role("link", name="Refresh every 5 seconds").click()
        assert page.locator('meta[http-equiv="refresh"]').count() == 1
        page.get_by_role("link", name="Stop refreshing").click()
        assert page.locator('meta[http-equiv="refresh"]').count() == 0
    finally:
        context.close()
    assert found == {name: [] for name in found}


def test_the_pages_read_well_at_a_phone_width_with_their_sections_apart(chromium, live_server, shop):
    context = chromium.new_context(viewport=PHONE, base_url=live_server.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        best = best_seller(page)
        for name, path in PAGES.items():
            page.goto(path.format(best=best))
            shot(page, f"a11y-phone-{name.replace(' ', '-')}")
            wide = page.evaluate(
                """() => [document.documentElement, ...document.querySelectorAll('main *')]
                    .filter(el => !el.closest('.visually-hidden'))
                    .filter(el => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible'
                                  || el.getBoundingClientRect().right > window.innerWidth + 1)
                    .map(el => el.tagName.toLowerCase() + (el.className ? '.' + el.className : ''))"""
            )
            assert wide == [], f"{name}: wider than the screen or scrolling sideways: {wide}"
        page.goto(PAGES["product"].format(best=best))
        for badge in page.locator(".badge").all():
            size = badge.evaluate("el => parseFloat(getComputedStyle(el).fontSize)")
            assert size >= 16, f"a rank badge in {size}px type"
        for chart in page.locator(".chart svg").all():
            assert chart.bounding_box()["width"] >= PHONE["width"] - 40  # the screen's, less its margins
        gaps = badge_gaps(page)
        assert len(gaps) >= 2  # the sales badges and the engagement badges
        assert min(gaps) >= 16, f"a list of badges is {min(gaps)}px from the heading below it"
    finally:
        context.close()
