"""A version brought up to the live one: the batches the ticks logged since it was built, replayed
into it in order (routed by category when it is laid out otherwise), exactly once each."""

from collections import defaultdict
from typing import Any, cast

from rankings.engine import store
from rankings.engine.batches import batch_replay
from rankings.engine.shards import Layout, active, version_layout
from rankings.engine.split import base_of
from rankings.models import Batch, RankingVersion, ShardState


class VersionError(Exception):
    pass


def catch_up(number: int, shard: int, *, gen: str | None = None) -> int:
    """Replay the logged batches the version has not seen, in order; return how many."""
    gen = gen or store.generation_get(number)
    if gen is None:
        raise VersionError(f"version {number} is not in Redis any more (lost or deleted)")
    state = store.shard_state(number, shard)
    if state.get("gen") != gen:
        raise VersionError(f"version {number} lost shard {shard} in Redis")
    current = int(state.get("seq", 0))
    # The shard's row first: a batch commits together with it, so every batch up
    # to the seq read here is visible below (unless the log has dropped it).
    latest_seq, latest_as_of = ShardState.objects.filter(shard=shard).values_list("seq", "as_of").first() or (
        0,
        None,
    )
    replayed = 0
    batches = Batch.objects.filter(shard=shard, seq__gt=current, seq__lte=latest_seq).order_by("seq")
    for batch in batches.iterator():
        if batch.seq != current + 1:
            break
        if batch_replay(batch=batch, version=number, gen=gen) < 0:
            raise VersionError(f"shard {shard}: version {number} refused batch {batch.seq}")
        current += 1
        replayed += 1
    if current < latest_seq:
        raise VersionError(
            f"shard {shard}: batch {current + 1} is no longer logged; rebuild instead of catching up"
        )
    if latest_as_of is not None:
        store.shard_touch(version=number, shard=shard, seq=current, as_of=latest_as_of.timestamp(), gen=gen)
    return replayed


def version_gen(number: int) -> str:
    gen = store.generation_get(number)
    if gen is None:
        raise VersionError(f"version {number} is not in Redis any more (lost or deleted)")
    return gen


def _catch_up_routed(number: int, layout: Layout, live: Layout) -> int:
    """Replay into version `number` (laid out with `layout`) the batches of every shard of the `live`
    layout that its shards have not seen, each change on the shard of its category; return how many."""
    gen = version_gen(number)
    states = {shard: store.shard_state(number, shard) for shard in range(layout.shards)}
    lost = [shard for shard, state in states.items() if state.get("gen") != gen]
    if lost:
        raise VersionError(f"version {number} lost shards {lost} in Redis")
    replayed = 0
    for source in range(live.shards):
        seen = min(store.shard_sources(state).get(source, 0) for state in states.values())
        # The shard's row first: every batch up to its seq is then visible below.
        latest = ShardState.objects.filter(shard=source).values_list("seq", flat=True).first() or 0
        current = seen
        for batch in (
            Batch.objects.filter(shard=source, seq__gt=seen, seq__lte=latest).order_by("seq").iterator()
        ):
            if batch.seq != current + 1:
                break
            _replay_routed(number, layout, batch, gen)
            current += 1
            replayed += 1
        if current < latest:
            raise VersionError(
                f"shard {source}: batch {current + 1} is no longer logged; rebuild instead of catching up"
            )
        for shard in range(layout.shards):  # also the shards no batch touched have seen them all
            store.shard_sources_set(
                version=number, shard=shard, gen=gen, sources={source: latest}, replace=False
            )
    return replayed


def _replay_routed(number: int, layout: Layout, batch: Batch, gen: str) -> None:
    """One batch of the active layout, each change on its category's shard of `layout`."""
    routed: dict[int, list[store.Change]] = defaultdict(list)
    # A PackedField gives back the rows it was given (the stubs know a BinaryField's bytes only).
    for row in cast(list[list[Any]], batch.changes):
        change = store.Change(*row)
        # A board split otherwise in `layout`: the change goes to the board that holds its product there.
        category = layout.board_of(base_of(change.category), change.product_id)
        if category != change.category:
            change = change._replace(category=category)
        routed[layout.shard_of(category)].append(change)
    for shard, changes in routed.items():
        outcome = store.batch_apply_routed(
            version=number, shard=shard, source=batch.shard, seq=batch.seq,
            as_of=batch.as_of.timestamp(), gen=gen, changes=changes,
        )  # fmt: skip
        if outcome < 0:
            raise VersionError(f"version {number} lost shard {shard} in Redis")


def _active_era() -> int:
    number = active().number
    return RankingVersion.objects.filter(number=number).values_list("log_era", flat=True).first() or 0


def era_check(number: int) -> None:
    """Refuse a version whose positions follow a batch log that a re-layout has since renumbered."""
    era = RankingVersion.objects.filter(number=number).values_list("log_era", flat=True).first()
    if era != _active_era():
        raise VersionError(
            f"version {number} was built before the last switch-over that re-laid out the shards or"
            " changed the category tree: its batches are numbered or counted otherwise; rebuild instead"
        )


def catch_up_version(number: int) -> None:
    """Bring version `number` up to the last committed batch of every shard; the caller holds the
    version-change lock, so that the shards are not re-laid out meanwhile."""
    era_check(number)
    _, _, live = active()
    layout = version_layout(number)
    if layout == live:
        for shard in range(layout.shards):
            catch_up(number, shard)
    else:
        _catch_up_routed(number, layout, live)
