"""The admin: raw sales, engagement events and ingest calls (read-only for everyone), versions and the operator's view."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.db.models.expressions import RawSQL
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from catalogue.admin_lists import LargeTableAdmin
from catalogue.money import cents_text
from rankings import tasks
from rankings.conf import METRICS, rankings_settings
from rankings.engine.shards import MAX_SHARDS, Layout, LayoutError, active, layout_plan, split_setting
from rankings.engine.split import SplitError
from rankings.engine.tree import tree_change, tree_pending, version_tree
from rankings.engine.windows import configured_windows
from rankings.models import (
    Alert,
    AlertAttempt,
    ApiToken,
    Engagement,
    IngestLog,
    RankingVersion,
    Sale,
    SaleId,
)
from rankings.operations import backfill, compare
from rankings.operations.alerts import alert_delete, alert_file, alert_problems
from rankings.serving import dashboard as operations


class ReadOnlyAdmin(LargeTableAdmin):
    """Rows that are facts, not settings: nobody adds, changes or deletes them here, superusers included."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("sale", "sales"), ("return", "returns")]

    def queryset(self, request, queryset):
        if self.value() == "sale":
            return queryset.filter(return_of__isnull=True)
        if self.value() == "return":
            return queryset.filter(return_of__isnull=False)
        return queryset


# What writes IngestLog.source: the APIs, the imports and the demo, of sales and of engagement.
INGEST_SOURCES = ("api", "import", "demo", "engage-api", "engage-import", "engage-demo")


class SourceFilter(admin.SimpleListFilter):
    """The ingest paths, named rather than read with a SELECT DISTINCT over every call logged."""

    title = "source"
    parameter_name = "source"

    def lookups(self, request, model_admin):
        return [(source, source) for source in INGEST_SOURCES]

    def queryset(self, request, queryset):
        return queryset.filter(source=self.value()) if self.value() else queryset


# Sales an event id prefix finds at most: a page of the list, many times over.
EVENT_ID_MATCHES = 1000


@admin.register(Engagement)
class EngagementAdmin(ReadOnlyAdmin):
    """Raw views and wishes, kept for the retention (RANKINGS_ENGAGEMENT_RETENTION_DAYS) and then
    dropped a day at a time."""

    list_display = ["ts", "kind", "product_id", "categories", "event_id", "received_at"]
    # Exact matches only: the partitioned table's one index is its key, and days are read whole.
    search_fields = ["=product_id"]
    search_help_text = "A product id."
    date_lookups_field = "ts"
    list_filter = ["kind", ("ts", admin.DateFieldListFilter)]
    # Newest first by the key each day's partition is indexed on: a page reads a page of each day,
    # where an order by time would sort every event kept.
    ordering = ["-id"]
    list_per_page = 100


@admin.register(Sale)
class SaleAdmin(ReadOnlyAdmin):
    """Raw sales are the source of truth, kept forever; corrections come as returns, not edits."""

    list_display = [
        "event_id",
        "ts",
        "product_link",
        "category_list",
        "qty",
        "amount",
        "return_of",
        "received_at",
    ]
    list_select_related = ["product"]
    # Exact or prefix matches only, so that each search uses an index on a table of millions: the
    # product and the returned sale on the sales table's own, an event id (or its beginning)
    # through SaleId, the index of every event id (the partitioned table has none).
    search_fields = ["=product__product_id", "=return_of"]
    search_help_text = "An event id (or its beginning), a product id, or the id of a returned sale."
    # By the instant a sale counts in (a return: its original's), whose index the windows need
    # anyway; an index on ts as well would cost every sale ingested.
    date_lookups_field = "counted_at"
    list_filter = [KindFilter, ("counted_at", admin.DateFieldListFilter)]
    ordering = ["-counted_at", "-id"]
    list_per_page = 100
    fields = [
        "event_id",
        "ts",
        "product_link",
        "category_list",
        "qty",
        "amount",
        "return_of",
        "counted_at",
        "received_at",
        "digest",
    ]

    def get_search_results(self, request, queryset, search_term):
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            ids = SaleId.objects.filter(event_id__startswith=term).values_list("sale_id", flat=True)
            found |= queryset.filter(id__in=list(ids[:EVENT_ID_MATCHES]))
        return found, may_have_duplicates

    @admin.display(description="product", ordering="product_id")
    def product_link(self, obj):
        url = reverse("admin:catalogue_product_change", args=[obj.product.pk])
        return format_html('<a href="{}">{}</a> {}', url, obj.product_id, obj.product.name)

    @admin.display(description="categories")
    def category_list(self, obj):
        return ", ".join(obj.categories)

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, obj):
        return cents_text(-obj.amount_cents if obj.qty < 0 else obj.amount_cents)


@admin.register(IngestLog)
class IngestLogAdmin(ReadOnlyAdmin):
    list_display = ["at", "source", "accepted", "duplicates", "rejected"]
    list_filter = [SourceFilter, ("at", admin.DateFieldListFilter)]
    date_lookups_field = "at"
    ordering = ["-at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens by the first characters of their key; only a hash of the rest is stored, so no page
    can show a key. `manage.py ingest_token` makes them; here they are revoked."""

    list_display = ["prefix", "user", "created", "last_used"]
    list_select_related = ["user"]
    search_fields = ["^prefix", "=user__username"]
    ordering = ["-created"]
    fields = readonly_fields = ("prefix", "user", "created", "last_used")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_actions(self, request):
        """Revoking is the one way to delete tokens in bulk."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Revoke selected tokens", permissions=["delete"])
    def revoke(self, request, queryset):
        revoked, _ = queryset.delete()
        self.message_user(request, f"Revoked {revoked} token(s): their keys no longer authenticate.")


# --- rank alerts and their deliveries -------------------------------------------------


class AlertForm(forms.ModelForm):
    # Checked by the rule every alert's URL follows (webhooks.url_refusal), not as a form's URL.
    url = forms.CharField(label="webhook URL", max_length=2000)
    window = forms.ChoiceField(choices=lambda: [(w, w) for w in rankings_settings.SNAPSHOT_WINDOWS])
    metric = forms.ChoiceField(choices=[(m, m) for m in METRICS])

    class Meta:
        model = Alert
        fields = ["user", "product_id", "category", "window", "metric", "rule", "number", "url"]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        fields = {
            name: data[name]
            for name in ("product_id", "category", "window", "metric", "rule", "number", "url")
        }
        wire = {"productId": "product_id", "rule": "number"}
        for problem in alert_problems(**fields):
            self.add_error(wire.get(problem.field, problem.field), problem.reason)
        return data


class FailingFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "failing"

    def lookups(self, request, model_admin):
        return [("yes", "failing"), ("no", "delivering")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(failing_since__isnull=False)
        if self.value() == "no":
            return queryset.filter(failing_since__isnull=True)
        return queryset


# The latest attempts an alert's page shows; the attempts list has the rest.
ATTEMPTS_SHOWN = 20


@admin.register(Alert)
class AlertAdmin(LargeTableAdmin):
    """Rank alerts: their board and rule, where they deliver, their latest answer; a new one's signing
    secret is shown once, when it is saved."""

    form = AlertForm
    list_display = ["id", "user", "product_id", "category", "window", "metric", "rule_text", "host",
                    "last_answer", "failing_since", "created_at"]  # fmt: skip
    list_select_related = ["user"]
    list_filter = [FailingFilter, "rule", "window", "metric"]
    search_fields = ["=product_id", "=user__username"]
    search_help_text = "A product id or a user name."
    ordering = ["-id"]
    autocomplete_fields = ["user"]
    readonly_fields = ["host", "shard", "since", "created_at", "failing_since", "latest_attempts"]
    list_per_page = 100

    def get_queryset(self, request):
        # Each row's latest attempt: one probe of the (alert, at) index per row of the page.
        latest = AlertAttempt.objects.filter(alert=OuterRef("pk")).order_by("-at")
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_status=Subquery(latest.values("status")[:1]),
                last_error=Subquery(latest.values("error")[:1]),
            )
        )

    def get_actions(self, request):
        """No bulk delete: its confirmation would list every firing and attempt of every alert chosen
        (an alert's own page lists at most its week of them)."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def get_deleted_objects(self, objs, request):
        """An alert's firings and attempts go with it, though nobody deletes attempts on their own."""
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request, obj):
        alert_delete(user=obj.user, alert_id=obj.id)

    def save_model(self, request, obj, form, change):
        secret = alert_file(obj)
        if secret:
            self.message_user(
                request, f"The alert signs its webhooks with {secret}: copy it now, it is not shown again.",
                messages.WARNING,
            )  # fmt: skip

    @admin.display(description="rule")
    def rule_text(self, obj):
        return f"{obj.rule} {obj.number}"

    @admin.display(description="last answer")
    def last_answer(self, obj):
        if obj.last_status is None and not obj.last_error:
            return "–"
        return obj.last_status or obj.last_error

    @admin.display(description="latest attempts")
    def latest_attempts(self, obj):
        if obj.pk is None:
            return "–"
        rows = obj.attempts.select_related("firing").order_by("-at")[:ATTEMPTS_SHOWN]
        every = reverse("admin:rankings_alertattempt_changelist") + f"?alert__id__exact={obj.pk}"
        table = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td></tr>",
            (
                (
                    a.at,
                    a.firing.kind,
                    a.firing.webhook_id,
                    a.status or "–",
                    a.error or "ok",
                    f"{a.duration_ms:.0f}",
                )
                for a in rows
            ),
        )
        return format_html(
            "<table><tr><th>at</th><th>firing</th><th>webhook-id</th><th>answer</th><th>outcome</th>"
            '<th>took</th></tr>{}</table><a href="{}">every attempt</a>',
            table,
            every,
        )


class OutcomeFilter(admin.SimpleListFilter):
    title = "outcome"
    parameter_name = "outcome"

    def lookups(self, request, model_admin):
        return [("ok", "delivered (2xx)"), ("failed", "refused or no answer")]

    def queryset(self, request, queryset):
        delivered = {"status__gte": 200, "status__lt": 300}
        if self.value() == "ok":
            return queryset.filter(**delivered)
        if self.value() == "failed":
            return queryset.exclude(**delivered)
        return queryset


@admin.register(AlertAttempt)
class AlertAttemptAdmin(ReadOnlyAdmin):
    """Every delivery of every firing, newest first: what the receiver answered, or why nothing came."""

    list_display = ["at", "alert_id", "kind", "webhook_id", "status", "error", "duration_ms"]
    list_select_related = ["firing"]
    list_filter = [OutcomeFilter, ("at", admin.DateFieldListFilter)]
    date_lookups_field = "at"
    ordering = ["-at"]
    list_per_page = 100

    def lookup_allowed(self, lookup, value, request=None):
        return lookup == "alert__id__exact" or super().lookup_allowed(lookup, value, request)

    @admin.display(description="firing")
    def kind(self, obj):
        return f"{obj.firing.kind} at {obj.firing.at:%Y-%m-%d %H:%M}"

    @admin.display(description="webhook-id")
    def webhook_id(self, obj):
        return obj.firing.webhook_id


# --- operations: versions, rebuild, compare, switch, status -------------------------


# Categories under a parent in a version's tree; none worked out for a deleted version.
_TREE_ENTRIES = "CASE WHEN state = %s THEN NULL ELSE (SELECT count(*) FROM jsonb_object_keys(tree)) END"


def _require(request, permission: str) -> None:
    if not request.user.has_perm(f"rankings.{permission}"):
        raise PermissionDenied


@admin.register(RankingVersion)
class RankingVersionAdmin(ReadOnlyAdmin):
    """Rebuild the boards into a new version, compare it with the live one, switch, switch back."""

    change_list_template = "admin/rankings/rankingversion/change_list.html"
    list_display = ["number", "state", "layout", "tree_size", "progress_display", "sales", "rate_display", "eta",
                    "created_at", "built_at", "activated_at", "retired_at", "message", "operations"]  # fmt: skip
    list_display_links = None
    ordering = ["-number"]

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("rebuild/", view(self.rebuild_view), name="rankings_rankingversion_rebuild"),
            path("status/", view(self.status_view), name="rankings_status"),
            path("<int:number>/compare/", view(self.compare_view), name="rankings_rankingversion_compare"),
            path("<int:number>/switch/", view(self.switch_view), name="rankings_rankingversion_switch"),
        ] + super().get_urls()

    def get_queryset(self, request):
        # A version's tree holds every category under a parent (tens of megabytes at a million
        # categories), and every rebuild leaves a row: its size is counted in PostgreSQL, and only
        # for the versions that can still serve.
        return (
            super()
            .get_queryset(request)
            .defer("tree")
            .annotate(tree_entries=RawSQL(_TREE_ENTRIES, [RankingVersion.State.DELETED]))
        )

    def changelist_view(self, request, extra_context=None):
        building = RankingVersion.objects.filter(state=RankingVersion.State.BUILDING).exists()
        number, _, live = active()
        # The catalogue's tree unlike the active version's: what a rebuild and switch would change.
        pending = tree_pending()
        context = {
            "tree_change": pending,
            "boards_per_category": len(configured_windows()) * len(METRICS),
            "building": building,
            "active_number": number,
            "active_layout": live.describe(),
            "rebuild_form": RebuildForm(initial={"shards": live.hashed}),
            "can_rebuild": request.user.has_perm("rankings.rebuild_rankings"),
            "can_view_status": request.user.has_perm("rankings.view_status"),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=context)

    @admin.display(description="tree")
    def tree_size(self, obj):
        if obj.tree_entries is None:
            return "–"
        return f"{obj.tree_entries} under a parent" if obj.tree_entries else "flat"

    @admin.display(description="shards")
    def layout(self, obj):
        return Layout(obj.shards, tuple(obj.pinned)).describe()

    @admin.display(description="progress")
    def progress_display(self, obj):
        return format_html(
            '<progress max="100" value="{}"></progress> {}%',
            round(obj.progress * 100),
            round(obj.progress * 100),
        )

    @admin.display(description="rate")
    def rate_display(self, obj):
        return f"{obj.rate:,.0f} sales/s" if obj.rate else "–"

    @admin.display(description="ETA")
    def eta(self, obj):
        if obj.state != RankingVersion.State.BUILDING or obj.progress <= 0:
            return "–"
        elapsed = (timezone.now() - obj.created_at).total_seconds()
        return f"{elapsed / obj.progress * (1 - obj.progress):.0f} s"

    @admin.display(description="")
    def operations(self, obj):
        links = []
        if obj.state in (RankingVersion.State.READY, RankingVersion.State.RETIRED):
            compare = reverse("admin:rankings_rankingversion_compare", args=[obj.number])
            links.append(format_html('<a href="{}">compare and switch…</a>', compare))
        return format_html_join(" ", "{}", ((link,) for link in links))

    @method_decorator(require_POST)
    def rebuild_view(self, request):
        _require(request, "rebuild_rankings")
        form = RebuildForm(request.POST)
        try:
            if not form.is_valid():
                raise LayoutError("; ".join(f"{field}: {' '.join(e)}" for field, e in form.errors.items()))
            data = form.cleaned_data
            _, _, live = active()
            # The boards RANKINGS_SPLIT names are split in the new version (and only those).
            layout = layout_plan(
                live, shards=data["shards"], pin=data["pin"], unpin=data["unpin"], split=split_setting()
            )
        except (LayoutError, SplitError) as error:
            self.message_user(request, f"Nothing was rebuilt: {error}", messages.ERROR)
            return redirect("admin:rankings_rankingversion_changelist")
        activate = data["activate"]
        transaction.on_commit(
            lambda: tasks.version_build.delay(
                activate=activate, shards=layout.shards, pinned=list(layout.pinned)
            )
        )
        started = "A rebuild has started" + (f", laid out with {layout.describe()}" if layout != live else "")
        self.message_user(request, f"{started}; its progress shows below.", messages.SUCCESS)
        return redirect("admin:rankings_rankingversion_changelist")

    def compare_view(self, request, number):
        _require(request, "rebuild_rankings")
        version = get_object_or_404(RankingVersion, number=number)
        form = CompareForm(request.POST or None)
        comparisons, sampled, categories = None, None, 0
        if request.method == "POST" and form.is_valid():
            sampled, categories = compare.compare_sample()
            try:
                comparisons = compare.versions_compare(
                    number=number, top_n=form.cleaned_data["top_n"], categories=sampled
                )
            except backfill.VersionError as error:
                self.message_user(request, str(error), messages.ERROR)
        differing = [c for c in comparisons or [] if not c.equal]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Compare version {number} with the live version {active().number}",
            "opts": self.model._meta,
            "version": version,
            "form": form,
            "comparisons": comparisons,
            "differing": [_side_by_side(c) for c in differing[:50]],
            "differing_count": len(differing),
            # Categories drawn at random besides `all` (none: every board was compared), of how many.
            "sampled": len(sampled) - 1 if sampled else 0,
            "categories": categories,
            "tree_change": tree_change(version_tree(active().number), version_tree(number)),
            "can_switch": request.user.has_perm("rankings.switch_rankings"),
        }
        return TemplateResponse(request, "admin/rankings/rankingversion/compare.html", context)

    @method_decorator(require_POST)
    def switch_view(self, request, number):
        _require(request, "switch_rankings")
        try:
            backfill.version_switch(number=number)
        except backfill.VersionError as error:
            self.message_user(request, str(error), messages.ERROR)
        else:
            self.message_user(request, f"Version {number} now serves every read.", messages.SUCCESS)
        return redirect("admin:rankings_rankingversion_changelist")

    def status_view(self, request):
        _require(request, "view_status")
        data = operations.operations_read()
        context = {
            **self.admin_site.each_context(request),
            "title": "Rankings status",
            "opts": self.model._meta,
            **data,
            "chart": operations.hourly_chart(data["hourly"]),
        }
        return TemplateResponse(request, "admin/rankings/status.html", context)


class SlugsField(forms.CharField):
    """Category slugs, separated by commas or spaces."""

    def to_python(self, value):
        return [slug for slug in (super().to_python(value) or "").replace(",", " ").split() if slug]


class RebuildForm(forms.Form):
    activate = forms.BooleanField(required=False, label="switch to it as soon as it is ready")
    shards = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_SHARDS, label="hashed shards",
        help_text="categories spread by hash; blank: as many as the active version",
    )  # fmt: skip
    pin = SlugsField(required=False, label="pin", help_text="categories to give a shard of their own")
    unpin = SlugsField(required=False, label="unpin", help_text="pinned categories to hash again")


class CompareForm(forms.Form):
    top_n = forms.IntegerField(
        label="Compare the first N ranks of every board", min_value=1, max_value=10_000, initial=100
    )


def _side_by_side(c: compare.BoardComparison) -> dict:
    rows = []
    for i in range(max(len(c.live_top), len(c.new_top))):
        live = c.live_top[i] if i < len(c.live_top) else None
        new = c.new_top[i] if i < len(c.new_top) else None
        rows.append({"rank": i + 1, "live": live, "new": new, "same": live == new})
    return {"board": c, "rows": rows}
