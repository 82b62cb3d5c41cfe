"""The admin's compare before a switch, at a million categories: it compares the boards of `all`
and a bounded sample of categories, in one request, rather than every board of every category."""

import pytest

from rankings.operations import backfill, compare

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def twelve_categories():
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", categories=[f"c{i}"], qty=1 + i % 3) for i in range(12)])
    shop.tick()
    return shop


def test_a_large_catalogue_is_compared_on_all_and_a_sample_of_categories(
    admin_client, twelve_categories, monkeypatch
):
    # given a rebuilt version, and a compare bounded at three categories
    version = backfill.version_build()
    monkeypatch.setattr(compare, "COMPARE_CATEGORIES", 3)
    # when the operator compares it with the live one
    page = admin_client.post(f"/admin/rankings/rankingversion/{version.number}/compare/", {"top_n": 10})
    # then the boards of `all` and of three categories drawn at random were compared, and the page says so
    assert page.status_code == 200
    compared = {c.category for c in page.context["comparisons"]}
    assert "all" in compared and len(compared) == 4
    assert "3 of 12 categories drawn at random" in page.content.decode()
    assert "every one equal" in page.content.decode()


def test_a_small_catalogue_is_compared_whole(admin_client, twelve_categories):
    version = backfill.version_build()

    page = admin_client.post(f"/admin/rankings/rankingversion/{version.number}/compare/", {"top_n": 10})

    assert {c.category for c in page.context["comparisons"]} == {"all", *(f"c{i}" for i in range(12))}
    assert "drawn at random" not in page.content.decode()


def test_a_version_laid_out_otherwise_is_compared_on_the_same_sample(
    admin_client, twelve_categories, monkeypatch
):
    from rankings.engine.shards import Layout, active

    version = backfill.version_build(layout=Layout(active().layout.shards + 3, ()))
    monkeypatch.setattr(compare, "COMPARE_CATEGORIES", 3)

    page = admin_client.post(f"/admin/rankings/rankingversion/{version.number}/compare/", {"top_n": 10})

    compared = {c.category for c in page.context["comparisons"]}
    assert "all" in compared and len(compared) == 4
    assert "every one equal" in page.content.decode()
