"""What moves in Chromium: the movers page, the arrows on a category's list, a product's rank chart.

Same set-up as tests/test_browser.py (Debian's Chromium through Playwright, against a live server
holding real ticked data); screenshots go to artifacts/screenshots/.
"""

import datetime as dt
import re

import pytest

from catalogue.models import Category, Product

from .browser import shot
from .rankings_helpers import START, Shop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DAY_LATER = START + dt.timedelta(hours=24, minutes=30)


@pytest.fixture
def shop():
    """Yesterday at noon Kite > Yo-yo > Puzzle > Robot in Toys; today Robot leads, Puzzle is
    second, Drone is new and Kite fell to fourth."""
    toys = Category.objects.create(slug="toys", name="Toys")
    for i, name in enumerate(["Kite", "Yo-yo", "Puzzle", "Robot", "Ball", "Drone"]):
        Product.objects.create(product_id=f"p{i}", name=name, price_cents=100).categories.set([toys])
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=qty) for i, qty in enumerate([10, 5, 3, 1])])
    shop.tick()
    shop.now = DAY_LATER
    shop.send(shop.sale("p3", qty=20), shop.sale("p2", qty=4), shop.sale("p5", qty=2), shop.sale("p0", qty=1))
    shop.tick()
    return shop


def test_the_movers_page_lists_the_climbs_of_the_day(page):
    from playwright.sync_api import expect

    page.goto("/c/toys/?window=1d")
    page.get_by_role("link", name="Movers and shakers").click()
    expect(page).to_have_url(re.compile(r"/c/toys/movers/$"))
    page.get_by_role("navigation", name="Time window").get_by_role("link", name="1 day").click()
    expect(page).to_have_url(re.compile(r"/c/toys/movers/\?window=1d$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Movers and shakers in Toys")
    rows = page.locator("ol.movers > li")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("Drone")
    expect(rows.nth(0)).to_contain_text("#3, previously unranked")
    expect(rows.nth(1)).to_contain_text("Robot")
    expect(rows.nth(1)).to_contain_text("#1, was #4 (+300%)")
    expect(rows.nth(2)).to_contain_text("#2, was #3 (+50%)")
    shot(page, "moves-01-movers")


def test_the_category_list_shows_arrows_against_24_hours_before(page):
    from playwright.sync_api import expect

    page.goto("/c/toys/?window=1d")
    rows = page.locator("table.board tbody tr")
    expect(rows).to_have_count(4)
    expect(page.locator("table.board thead")).to_contain_text("24 h")
    moves = rows.locator("td.move")
    expect(moves.nth(0)).to_contain_text("▲ 3")
    expect(moves.nth(0)).to_contain_text("up 3 places since 24 hours ago (was #4)")
    expect(moves.nth(1)).to_contain_text("▲ 1")
    expect(moves.nth(2)).to_contain_text("new")
    expect(moves.nth(3)).to_contain_text("▼ 3")
    assert moves.nth(3).get_attribute("class").split()[-1] == "move-down"
    shot(page, "moves-02-arrows")
    # a window without snapshots has no arrows
    page.goto("/c/toys/?window=30d")
    expect(page.locator("td.move")).to_have_count(0)


def test_a_product_page_charts_its_rank_hour_by_hour(page):
    from playwright.sync_api import expect

    page.goto("/p/p3/?window=1d")
    section = page.locator("section", has=page.get_by_role("heading", name=re.compile("^Rank in Toys")))
    expect(section).to_have_count(1)
    svg = section.locator("svg")
    expect(svg).to_be_visible()
    # ranked fourth from yesterday's noon to this morning's eleven, then unranked (a gap)
    expect(svg.locator("polyline")).to_have_count(1)
    points = svg.locator("polyline").get_attribute("points").split()
    assert len(points) == 24
    assert len({p.split(",")[1] for p in points}) == 1  # the same rank all along
    section.get_by_text("Rank each hour").click()
    hours = section.locator("details tbody tr")
    expect(hours).to_have_count(25)
    expect(hours.first).to_contain_text("4")
    expect(hours.last).to_contain_text("not ranked")
    shot(page, "moves-03-rank-history")
