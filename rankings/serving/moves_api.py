"""The API of what moves (docs/api.md, "What moves"): movers, new releases, a product's rank history."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from rankings.conf import METRICS, rankings_settings
from rankings.serving import moves
from rankings.serving.api import (
    _READ_ERRORS,
    BoardReadApi,
    BoardTopReply,
    RankedItemReply,
    TopParams,
    _answer_wire,
    _BoardAnswer,
    _Error,
    _item_wire,
    _params,
    _Reply,
    _selected,
    iso_text,
)
from rankings.serving.rank_then import gain_percent

HISTORY_DAYS_MAX = 32  # days: snapshots are kept 32 days


class SnapshotParams(serializers.Serializer):
    """Parameters of a read of snapshots: only the windows that have them."""

    window = serializers.ChoiceField(choices=list(rankings_settings.SNAPSHOT_WINDOWS), default="7d")
    metric = serializers.ChoiceField(choices=list(METRICS), default="units")


class MoversParams(SnapshotParams):
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)


def _mover_wire(item) -> dict:
    return {**_item_wire(item), "gainPercent": gain_percent(item.rank, item.rank_then)}


class MoverItemReply(RankedItemReply):
    gainPercent = serializers.IntegerField(  # noqa: N815 - the wire's own name
        allow_null=True, help_text="floor(100 × (rankThen − rank) ÷ rank); null when rankThen is null"
    )

    wire = staticmethod(_mover_wire)

    class Meta:
        ref_name = "MoverItem"


class BoardMoversReply(_BoardAnswer):
    category = serializers.CharField()
    then = serializers.DateTimeField(allow_null=True, help_text="the hour of the snapshot compared")
    total = serializers.IntegerField(help_text="how many products moved up or are new in the first ranks")
    items = MoverItemReply(many=True)

    @staticmethod
    def wire(board: moves.Movers) -> dict:
        return {
            "category": board.category,
            **_answer_wire(board),
            "then": iso_text(board.then),
            "total": board.total,
            "items": [_mover_wire(item) for item in board.items],
        }

    class Meta:
        ref_name = "BoardMovers"


class BoardMoversApi(BoardReadApi):
    """Movers and shakers: the products ranked now within the first SNAPSHOT_DEPTH ranks that were
    unranked 24 hours before (first) or ranked lower (by gain, largest first)."""

    @extend_schema(
        operation_id="board_movers",
        parameters=[MoversParams],
        responses={200: BoardMoversReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, slug):
        return _selected(
            BoardMoversReply, moves.board_movers, category=slug, **_params(MoversParams, request)
        )


def _new_wire(item) -> dict:
    return {**_item_wire(item), "releasedAt": iso_text(item.released_at)}


class NewItemReply(RankedItemReply):
    releasedAt = serializers.DateTimeField(  # noqa: N815 - the wire's own name
        help_text="the catalogue's release where an editor set it, else the product's first sale's time"
    )

    wire = staticmethod(_new_wire)

    class Meta:
        ref_name = "NewItem"


class BoardNewReply(BoardTopReply):
    items = NewItemReply(many=True)

    @staticmethod
    def wire(board) -> dict:
        return {**BoardTopReply.wire(board), "items": [_new_wire(item) for item in board.items]}

    class Meta:
        ref_name = "BoardNew"


class BoardNewApi(BoardReadApi):
    """Hot new releases: the board restricted to the products released at most RANKINGS_NEW_DAYS
    days before its asOf, ranked 1…n among themselves."""

    @extend_schema(
        operation_id="board_new",
        parameters=[TopParams],
        responses={200: BoardNewReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, slug):
        return _selected(BoardNewReply, moves.board_new, category=slug, **_params(TopParams, request))


class HistoryParams(SnapshotParams):
    category = serializers.SlugField(max_length=50)
    days = serializers.IntegerField(min_value=1, max_value=HISTORY_DAYS_MAX, default=30)


class HistoryPointReply(serializers.Serializer):
    at = serializers.DateTimeField()
    rank = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "HistoryPoint"


class ProductHistoryReply(_Reply):
    productId = serializers.CharField()  # noqa: N815 - the wire's own name
    category = serializers.CharField()
    window = serializers.CharField()
    metric = serializers.CharField()
    points = HistoryPointReply(many=True)

    @staticmethod
    def wire(history: moves.History) -> dict:
        return {
            "productId": history.product_id,
            "category": history.category,
            "window": history.window,
            "metric": history.metric,
            "points": [{"at": iso_text(point.at), "rank": point.rank} for point in history.points],
        }

    class Meta:
        ref_name = "ProductHistory"


class ProductHistoryApi(BoardReadApi):
    """A product's rank in a board's hourly snapshots of the last `days` days, oldest first; rank is
    null where it was not in the snapshot's first SNAPSHOT_DEPTH ranks."""

    @extend_schema(
        operation_id="product_history",
        parameters=[HistoryParams],
        responses={200: ProductHistoryReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, product_id):
        return _selected(
            ProductHistoryReply,
            moves.product_history,
            product_id=product_id,
            **_params(HistoryParams, request),
        )
