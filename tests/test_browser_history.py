"""What a newcomer sees once the demo is loaded (as `make run` loads it: seed_demo, a tick, the
demo's history): arrows on a best-seller list, a movers page with climbs and their percentages, and
a best seller's rank hour by hour. Same set-up as tests/test_browser.py."""

import io
import re

import pytest
from django.utils import timezone

from rankings.engine.tick import tick
from rankings.operations.demo import DemoShape, demo_seed
from rankings.operations.first_run import demo_history

from .browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A demo of the real one's shape, small: three days of sales, so the day before has ranks too.
SMALL = DemoShape(sales=3000, days=3, categories=3, products=60, views_per_sale=1)


@pytest.fixture
def shop():
    demo_seed(shape=SMALL, seed=5)
    tick(now=timezone.now())
    out = io.StringIO()
    demo_history(out)
    assert "hourly history: " in out.getvalue()


def test_after_the_demo_loads_lists_show_arrows_movers_climb_and_ranks_have_a_history(page):
    from playwright.sync_api import expect

    page.goto("/c/cat0/?window=1d")
    expect(page.locator("table.board thead")).to_contain_text("24 h")
    arrows = page.locator("table.board tbody td.move")
    expect(arrows.first).to_be_visible()
    assert re.search(r"[▲▼=]", " ".join(arrows.all_inner_texts()))
    shot(page, "history-01-arrows")

    page.get_by_role("link", name="Movers and shakers").click()
    page.get_by_role("navigation", name="Time window").get_by_role("link", name="1 day").click()
    expect(page.locator("p.lede")).to_contain_text("against the ranks of")
    climbs = page.locator("ol.movers > li", has_text=re.compile(r"was #[\d,]+ \(\+[\d,]+%\)"))
    expect(climbs.first).to_be_visible()
    shot(page, "history-02-movers")

    page.goto("/c/cat0/?window=1d")
    page.locator("table.board tbody tr").first.get_by_role("link").first.click()
    section = page.locator("section", has=page.get_by_role("heading", name=re.compile("^Rank in")))
    svg = section.first.locator("svg")
    expect(svg).to_be_visible()
    points = " ".join(
        svg.locator("polyline").evaluate_all("lines => lines.map(l => l.getAttribute('points'))")
    )
    assert len(points.split()) > 24  # hour by hour, over more than a day
    shot(page, "history-03-rank-history")
