"""A shopper in Chromium: from the home page to a category, its switches and pages, a product and its badge.

Drives Debian's Chromium (apt package `chromium`) through Playwright against a
live server holding real ticked data. Screenshots go to artifacts/screenshots/.
"""

import datetime as dt
import re

import pytest

from catalogue.models import Category, Product

from .browser import PHONE, shot
from .rankings_helpers import Shop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shop():
    """Toys (120 products, so its boards have three pages), Gifts and Books, sold over three weeks."""
    toys = Category.objects.create(slug="toys", name="Toys")
    gifts = Category.objects.create(slug="gifts", name="Gifts")
    books = Category.objects.create(slug="books", name="Books")
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    events = []
    for i in range(120):
        product = Product.objects.create(product_id=f"t{i}", name=f"Wooden toy {i}", price_cents=500 + 37 * i)
        product.categories.set([toys, gifts] if i % 10 == 0 else [toys])
        # the more a toy sold this week the cheaper it is: units and revenue rank differently
        events.append(
            shop.sale(f"t{i}", categories=product_slugs(i), qty=i + 1, ago=dt.timedelta(days=i % 6))
        )
        events.append(shop.sale(f"t{i}", categories=product_slugs(i), qty=1, ago=dt.timedelta(days=20)))
    for i in range(12):
        product = Product.objects.create(product_id=f"b{i}", name=f"Book {i}", price_cents=1200)
        product.categories.set([books])
        events.append(shop.sale(f"b{i}", categories=["books"], qty=12 - i, ago=dt.timedelta(minutes=5 * i)))
    shop.send(*events)
    shop.tick()
    return shop


def product_slugs(i: int) -> list[str]:
    return ["toys", "gifts"] if i % 10 == 0 else ["toys"]


def test_a_shopper_goes_from_the_home_page_to_a_product_badge_and_back(page):
    from playwright.sync_api import expect

    # the home page: the overall leaders and each category's first three
    page.goto("/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Best sellers")
    overall = page.locator(".overall ol > li")
    expect(overall).to_have_count(10)
    expect(overall.first).to_contain_text("Wooden toy 119")
    expect(page.locator(".cards > li")).to_have_count(3)
    shot(page, "01-home")

    # a category page
    page.locator(".cards").get_by_role("link", name="Toys", exact=True).click()
    expect(page).to_have_url(re.compile(r"/c/toys/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Toys")
    rows = page.locator("table.board tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("Wooden toy 119")
    expect(page.locator(".updated")).to_contain_text("Updated")
    shot(page, "02-category")

    # switch the window: the board of the last hour holds no toy (they sold days ago)
    page.get_by_role("navigation", name="Time window").get_by_role("link", name="30 days").click()
    expect(page).to_have_url(re.compile(r"/c/toys/\?window=30d$"))
    expect(page.get_by_role("navigation", name="Time window").locator('[aria-current="page"]')).to_have_text(
        "30 days"
    )
    expect(rows.first.locator("td").nth(1)).to_have_text("121")  # 120 units this week + 1 long ago
    # switch the metric: the same window, ranked by revenue
    page.get_by_role("navigation", name="Rank by").get_by_role("link", name="Revenue").click()
    expect(page).to_have_url(re.compile(r"/c/toys/\?window=30d&metric=revenue$"))
    expect(page.locator("caption")).to_contain_text("last 30 days by revenue")
    revenues = [float(t.replace(",", "")) for t in rows.locator("td:nth-child(4)").all_inner_texts()]
    assert revenues == sorted(revenues, reverse=True)
    shot(page, "03-category-30d-revenue")

    # page forward, and back
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Next page").click()
    expect(page).to_have_url(re.compile(r"/c/toys/\?window=30d&metric=revenue&page=2$"))
    expect(rows.first.locator("th")).to_have_text("51")
    expect(page.locator(".pager-where")).to_have_text("Page 2 of 3")
    shot(page, "04-category-page-2")
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Previous page").click()
    expect(rows.first.locator("th")).to_have_text("1")

    # back to the default board, then open a product deep in it
    page.goto("/c/toys/?page=2")
    link = rows.nth(10).get_by_role("link")  # rank 61
    name = link.inner_text()
    link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name)
    expect(page.locator(".price")).to_contain_text("Price")
    badge = page.get_by_role("link", name="#61 in Toys")
    expect(badge).to_be_visible()
    expect(page.locator(".nearby li")).to_have_count(5)
    expect(page.locator(".nearby li.highlight")).to_contain_text(name)
    expect(page.locator(".chart svg rect")).to_have_count(30)
    shot(page, "05-product")

    # follow the badge: the category page holding rank 61, its row highlighted and in view
    badge.click()
    expect(page).to_have_url(re.compile(r"/c/toys/\?page=2&highlight=t59#product-t59$"))
    row = page.locator("tr.highlight")
    expect(row).to_have_count(1)
    expect(row.locator("th")).to_have_text("61")
    expect(row).to_contain_text(name)
    expect(row).to_be_in_viewport()
    shot(page, "06-badge-to-rank", full_page=False)  # what the shopper sees on arrival

    # and back to the product
    page.go_back()
    expect(page.get_by_role("heading", level=1)).to_have_text(name)


def test_the_pages_fit_a_phone_screen(chromium, live_server, shop):
    context = chromium.new_context(viewport=PHONE, base_url=live_server.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        for path, name in (
            ("/", "phone-home"),
            ("/c/toys/", "phone-category"),
            ("/p/t110/", "phone-product"),
        ):
            page.goto(path)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} is {overflow}px wider than the screen"
            shot(page, name)
    finally:
        context.close()


def test_keyboard_users_can_skip_to_the_content_and_see_where_focus_is(page):
    from playwright.sync_api import expect

    page.goto("/c/toys/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    outline = skip.evaluate("el => getComputedStyle(el).outlineStyle")
    assert outline not in ("", "none")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#main$"))
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent.trim()")
    assert focused == "Best sellers"  # the first link inside the content
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")


def test_a_bad_link_shows_an_error_page_not_a_server_error(page):
    from playwright.sync_api import expect

    reply = page.goto("/c/toys/?window=2d")
    assert reply.status == 400
    expect(page.get_by_role("heading", level=1)).to_have_text("This page cannot show that")
    reply = page.goto("/c/toys/?page=9")
    assert reply.status == 404
    expect(page.get_by_role("main")).to_contain_text("past the end")
    page.get_by_role("link", name="Back to the best sellers").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Best sellers")
