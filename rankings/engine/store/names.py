"""The catalogue's product names, copied into Redis: a read that names products at random among
millions (a product's neighbours) finds them in one round trip beside the board's, where
PostgreSQL's query cost it more than the board itself.

A copy, never the source: a name Redis lacks is read from the catalogue, so a copy that is behind
(a Redis that lost it, a product made by a bulk path) costs time, never a wrong answer. Written
after each edit commits (rankings.ingest.names), and mended by a walk over the catalogue that
overwrites only what Redis still holds as the walk read it, so an edit written meanwhile is never
undone by an older read (names_mend).
"""

import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping

from rankings.engine.store.client import clustered, patient, scripts_run, translated
from rankings.engine.store.keys import prefix

# Products are spread over this many hashes by a CRC of their id: at ten million products a bucket
# holds about 76 names, under Redis's default hash-max-listpack-entries (128), so each bucket stays
# in the compact encoding (about a third of a hash table's bytes) and a lookup in it stays cheap;
# on a Redis Cluster the buckets spread over every node.
NAMES_BUCKETS = 2**17


def bucket_of(product_id: str) -> int:
    return zlib.crc32(product_id.encode()) % NAMES_BUCKETS


def names_key(bucket: int) -> str:
    return f"{prefix()}:names:{{n{bucket}}}"


def _keys(product_ids: list[str]) -> list[str]:
    """names_key of each product's bucket (the prefix looked up once: a read names a dozen)."""
    head = f"{prefix()}:names:"
    return [f"{head}{{n{bucket_of(product_id)}}}" for product_id in product_ids]


def names_walk_key() -> str:
    """Where the walk over the catalogue stands (names_walk_read)."""
    return f"{prefix()}:names:walk"


def names_pattern() -> str:
    return f"{prefix()}:names:*"


def _by_bucket(product_ids: Iterable[str]) -> dict[int, list[str]]:
    buckets: dict[int, list[str]] = defaultdict(list)
    for product_id in product_ids:
        buckets[bucket_of(product_id)].append(product_id)
    return buckets


@translated
def names_read(product_ids: Iterable[str], *, client=None) -> dict[str, str]:
    """The names Redis holds of `product_ids`, in one round trip: one call on one server
    (lua/names_get.lua), each bucket's HMGET, a node's at once, on a Redis Cluster (whose calls reach
    one slot); a product it lacks is left out."""
    ids = sorted(set(product_ids))
    if not ids:
        return {}
    if clustered():
        buckets = _by_bucket(ids)
        ids = [product_id for bucket_ids in buckets.values() for product_id in bucket_ids]
        replies = scripts_run(
            [],
            commands=[("HMGET", names_key(b), *bucket_ids) for b, bucket_ids in buckets.items()],
            client=client,
        )
        names = [name for reply in replies for name in reply]
    else:
        (names,) = scripts_run([("names_get", _keys(ids), ids)], client=client)
    return {product_id: name.decode() for product_id, name in zip(ids, names, strict=True) if name}


@translated
def names_write(names: Mapping[str, str]) -> None:
    """Write `names` (after the edit that made them committed); an empty name is not kept."""
    buckets = _by_bucket(names)
    if not buckets:
        return
    pipe = patient().pipeline(transaction=False)
    for bucket, ids in buckets.items():
        kept = [word for product_id in ids if names[product_id] for word in (product_id, names[product_id])]
        if kept:
            pipe.hset(names_key(bucket), items=kept)
        gone = [product_id for product_id in ids if not names[product_id]]
        if gone:
            pipe.hdel(names_key(bucket), *gone)
    pipe.execute()


@translated
def names_delete(product_ids: Iterable[str]) -> None:
    """Forget the names of deleted products."""
    buckets = _by_bucket(product_ids)
    if not buckets:
        return
    pipe = patient().pipeline(transaction=False)
    for bucket, ids in buckets.items():
        pipe.hdel(names_key(bucket), *ids)
    pipe.execute()


# Products a call of names_mend.lua mends on one server: Redis answers others between calls.
MEND_CALL = 2_000


@translated
def names_mend(held: Mapping[str, str | None], truth: Mapping[str, str | None]) -> int:
    """Make Redis hold `truth` (the catalogue's names, None for no such product) for each product of
    `held` (what Redis held, read before the catalogue was), where Redis still holds what `held`
    says (lua/names_mend.lua); returns how many names changed. One round trip: calls of MEND_CALL
    products on one server, a call per bucket on a Redis Cluster."""
    ids = list(held)
    groups = (
        list(_by_bucket(ids).values())
        if clustered()
        else [ids[i : i + MEND_CALL] for i in range(0, len(ids), MEND_CALL)]
    )
    calls = [
        (
            "names_mend",
            _keys(group),
            [word for p in group for word in (p, held[p] or "", truth.get(p) or "")],
        )
        for group in groups
    ]
    return sum(int(n) for n in scripts_run(calls, client=patient())) if calls else 0


@translated
def names_held(product_ids: Iterable[str]) -> dict[str, str | None]:
    """What Redis holds of each product, None where it holds nothing: the first read of a mend."""
    ids = list(product_ids)
    found = names_read(ids, client=patient())
    return {product_id: found.get(product_id) for product_id in ids}


@translated
def buckets_held(buckets: range) -> dict[str, str]:
    """Every name Redis holds in `buckets`, in one round trip."""
    pipe = patient().pipeline(transaction=False)
    for bucket in buckets:
        pipe.hgetall(names_key(bucket))
    return {p.decode(): name.decode() for held in pipe.execute() for p, name in held.items()}


@translated
def names_walk_read() -> tuple[str, int]:
    """Where the walk stands: the last product id it mended, the next bucket it prunes."""
    product, bucket = patient().hmget(names_walk_key(), ["product", "bucket"])
    return product.decode() if isinstance(product, bytes) else "", int(bucket or 0)


@translated
def names_walk_set(*, product: str, bucket: int) -> None:
    patient().hset(names_walk_key(), mapping={"product": product, "bucket": bucket})
