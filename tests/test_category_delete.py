"""A category that a ranking version's tree names cannot be deleted, through the ORM or the admin:
the boards of the active version (or of one kept to switch back to) count by that tree, and a new
category given the slug would inherit them."""

import pytest
from django.db import transaction
from django.db.models import ProtectedError
from django.urls import reverse

from catalogue.models import Category
from rankings.models import RankingVersion
from rankings.operations import backfill

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counted_tree_moved_away():
    """'games' under 'toys' in the active version's tree; in the catalogue 'games' has since been
    moved to the top (pending), so nothing in the catalogue itself keeps 'toys'."""
    toys = Category.objects.create(slug="toys", name="Toys")
    Category.objects.create(slug="games", name="Games", parent=toys)
    backfill.version_build(activate=True)
    Category.objects.filter(slug="games").update(parent=None)
    return toys


def test_a_parent_the_active_tree_counts_into_cannot_be_deleted(counted_tree_moved_away):
    with pytest.raises(ProtectedError, match="'toys' is in the category tree of a ranking version"):
        Category.objects.get(slug="toys").delete()
    with pytest.raises(ProtectedError, match="'toys' is in the category tree"):
        Category.objects.filter(slug__in=["toys", "spare"]).delete()
    with pytest.raises(ProtectedError, match="'games' is in the category tree"):
        Category.objects.get(slug="games").delete()
    assert Category.objects.filter(slug__in=["toys", "games"]).count() == 2


def test_a_version_kept_to_switch_back_to_keeps_its_tree_and_an_expired_one_does_not(
    counted_tree_moved_away,
):
    # given the flat catalogue rebuilt and switched to: the tree with 'toys' is retired, kept
    backfill.version_build(activate=True)
    with pytest.raises(ProtectedError), transaction.atomic():
        Category.objects.get(slug="toys").delete()
    # when the retired version expires
    RankingVersion.objects.filter(state=RankingVersion.State.RETIRED).update(
        state=RankingVersion.State.DELETED
    )
    # then the category can go
    Category.objects.get(slug="toys").delete()
    assert not Category.objects.filter(slug="toys").exists()


def test_the_admin_says_why_and_refuses_the_delete(admin_client, counted_tree_moved_away):
    url = reverse("admin:catalogue_category_delete", args=[counted_tree_moved_away.pk])
    page = admin_client.get(url)
    posted = admin_client.post(url, {"post": "yes"})
    bulk = admin_client.post(
        reverse("admin:catalogue_category_changelist"),
        {"action": "delete_selected", "_selected_action": [counted_tree_moved_away.pk], "post": "yes"},
    )
    assert page.status_code == 200
    assert "is in the category tree of a ranking version" in page.content.decode()
    assert posted.status_code in (200, 403)
    assert "is in the category tree of a ranking version" in bulk.content.decode()
    assert Category.objects.filter(slug="toys").exists()
