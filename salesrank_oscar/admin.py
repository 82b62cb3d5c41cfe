"""The outbox in the Django admin: what waits, what salesrank rejected and why."""

from django.contrib import admin

from .models import OutboxEntry, State


@admin.register(OutboxEntry)
class OutboxEntryAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "key", "state", "reason", "attempts", "created", "sent_at"]
    list_filter = ["state", "kind"]
    search_fields = ["=key"]
    readonly_fields = ["kind", "key", "payload", "state", "reason", "attempts", "created", "sent_at"]
    ordering = ["-id"]
    # No count of a table that may hold a long outage's lines: the list shows "Show all" instead.
    show_full_result_count = False
    actions = ["send_again"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Send the selected rejected rows again", permissions=["change"])
    def send_again(self, request, queryset):
        """After the cause was fixed on salesrank's side (a token's permission, a category): the
        rows wait again, and the next send takes them."""
        again = queryset.filter(state=State.REJECTED).update(state=State.PENDING, reason="")
        self.message_user(request, f"{again} rows wait to be sent again")
