"""Rank alerts as their owners make, list and delete them (the API, the admin).

An alert is checked where it is made: the product and the category exist in the catalogue
(placeholders count), the window is one the snapshots record, the rule's number is 1 to
SNAPSHOT_DEPTH, the board is not split (its parts are snapshotted apart, so no rank of the whole
board is recorded), the URL passes webhooks.url_refusal, and its user holds fewer than
ALERTS_PER_USER. It is filed under the shard of its category in the active layout, read under the
shared layout lock that a switch-over's re-keying waits for, and judged from the engine's next hour
on (rankings/engine/alerts.py).
"""

from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max, QuerySet

from catalogue.models import Category, Product
from rankings.conf import METRICS, rankings_settings
from rankings.engine import locks
from rankings.engine.alerts import alert_shard
from rankings.engine.shards import ALL, active
from rankings.models import Alert, AlertFiring, ShardState
from rankings.operations.webhooks import secret_new, url_refusal


class AlertRefused(ValueError):
    """An alert that cannot be made: `field` names what is wrong, the message says why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def alert_problems(
    *, product_id: str, category: str, window: str, metric: str, rule: str, number: int, url: str
) -> list[AlertRefused]:
    """Everything wrong with an alert's fields (an empty list: nothing)."""
    problems = []
    windows = rankings_settings.SNAPSHOT_WINDOWS
    depth = rankings_settings.SNAPSHOT_DEPTH
    if not Product.objects.filter(product_id=product_id).exists():
        problems.append(AlertRefused("productId", f"unknown product {product_id!r}"))
    if category != ALL and not Category.objects.filter(slug=category).exists():
        problems.append(AlertRefused("category", f"unknown category {category!r}"))
    elif category in active().layout.split:
        problems.append(
            AlertRefused(
                "category",
                f"{category!r} is split over several shards and its ranks are not recorded whole:"
                " its boards cannot have alerts",
            )
        )
    if window not in windows:
        problems.append(
            AlertRefused("window", f"must be one of {', '.join(windows)} (the windows recorded every hour)")
        )
    if metric not in METRICS:
        problems.append(AlertRefused("metric", f"must be one of {', '.join(METRICS)}"))
    if rule not in Alert.Rule.values:
        problems.append(AlertRefused("rule", f"must be one of {', '.join(Alert.Rule.values)}"))
    if not 1 <= number <= depth:
        problems.append(AlertRefused("rule", f"{rule} must be a whole number from 1 to {depth:,}"))
    refusal = url_refusal(url)
    if refusal:
        problems.append(AlertRefused("url", refusal))
    return problems


def alert_file(alert: Alert) -> str | None:
    """Set what an alert derives from its fields (its host, its shard; a new one's secret and the
    instant it is judged from) and save it, in the caller's transaction, which holds the shared layout
    lock from here until it commits. Returns a new alert's secret (None for one changed), to be shown
    once."""
    locks.layout_read_lock()
    alert.host = (urlsplit(alert.url).hostname or "").lower()
    layout = active().layout
    alert.shard = alert_shard(alert.category, layout)
    secret = None
    if alert.pk is None:
        secret = alert.secret = secret_new()
        alert.since = ShardState.objects.aggregate(clock=Max("as_of"))["clock"]
    alert.save()
    return secret


@transaction.atomic
def alert_create(
    *, user, product_id: str, category: str, window: str, metric: str, rule: str, number: int, url: str
) -> tuple[Alert, str]:
    """Make `user` an alert; returns it and its signing secret (shown once). AlertRefused says what is
    wrong, the first thing found."""
    problems = alert_problems(
        product_id=product_id,
        category=category,
        window=window,
        metric=metric,
        rule=rule,
        number=number,
        url=url,
    )
    if problems:
        raise problems[0]
    # One creation at a time per user, so that two at once cannot both pass the bound.
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    most = rankings_settings.ALERTS_PER_USER
    if Alert.objects.filter(user=user).count() >= most:
        raise AlertRefused("alerts", f"at most {most:,} alerts per user; delete one to make another")
    alert = Alert(
        user=user, product_id=product_id, category=category, window=window, metric=metric, rule=rule,
        number=number, url=url,
    )  # fmt: skip
    secret = alert_file(alert)
    assert secret is not None
    return alert, secret


def alerts_of(user) -> QuerySet[Alert]:
    """The user's alerts, oldest first (at most ALERTS_PER_USER)."""
    return Alert.objects.filter(user=user).order_by("id")[: rankings_settings.ALERTS_PER_USER]


@transaction.atomic
def alert_delete(*, user, alert_id: int) -> bool:
    """Delete the user's alert `alert_id`, with its firings and their attempts; False when the user has
    no such alert. Its firings are locked first: a sender recording an attempt of one commits before
    (and its attempt is deleted too), or finds it gone."""
    list(
        AlertFiring.objects.select_for_update().filter(alert__user=user, alert_id=alert_id).values_list("id")
    )
    deleted, _ = Alert.objects.filter(user=user, id=alert_id).delete()
    return deleted > 0
