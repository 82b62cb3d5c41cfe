"""The catalogue's product names, copied into Redis: a read that names products at random among
millions (a product's neighbours) finds them in one round trip beside the board's, where
PostgreSQL's query cost it more than the board itself.

A copy: a name Redis lacks is read from the catalogue. Written by a push of products once it
commits, and mended from the catalogue by rankings.engine.names_copy (the names each edit
changed, within seconds; every name, by a walk), which overwrites only what Redis still holds as
it read it before the catalogue (names_mend), so no older read undoes a newer write.
"""

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping

from rankings.engine.store.client import clustered, patient, scripts_run, translated
from rankings.engine.store.keys import prefix

# Products are spread over this many hashes by their id's SHA-1: at ten million products a bucket
# holds about 76 names, under Redis's default hash-max-listpack-entries (128), so each bucket stays
# in the compact encoding (about a third of a hash table's bytes) and a lookup in it stays cheap;
# on a Redis Cluster the buckets spread over every node. SHA-1 because Redis's scripts can compute
# it (redis.sha1hex) as cheaply as this module: lua/neighbors.lua finds a board's members' names
# itself on one server.
NAMES_BUCKETS = 2**17


def bucket_of(product_id: str) -> int:
    """The bucket of a product: the last 17 bits of its id's SHA-1 (as lua/names_of.lua finds it)."""
    return int.from_bytes(hashlib.sha1(product_id.encode()).digest()[-3:], "big") % NAMES_BUCKETS


def names_head() -> str:
    """What each bucket's key begins with."""
    return f"{prefix()}:names:"


def names_key(bucket: int, head: str | None = None) -> str:
    """The key of a bucket; `head`, names_head() if given (a read names a dozen buckets: the prefix
    looked up once)."""
    return f"{head or names_head()}{{n{bucket}}}"


def _keys(product_ids: list[str]) -> list[str]:
    """names_key of each product's bucket."""
    head = names_head()
    return [names_key(bucket_of(product_id), head) for product_id in product_ids]


def names_walk_key() -> str:
    """Where the walk over the catalogue stands (names_walk_read)."""
    return f"{prefix()}:names:walk"


def _by_bucket(product_ids: Iterable[str]) -> dict[int, list[str]]:
    buckets: dict[int, list[str]] = defaultdict(list)
    for product_id in product_ids:
        buckets[bucket_of(product_id)].append(product_id)
    return buckets


# Products a Lua call reads or mends on one server: Redis answers others between calls.
CALL_PRODUCTS = 2_000


def _calls(name: str, ids: list[str], args) -> list[tuple[str, list, list]]:
    """Calls of lua/<name>.lua over `ids`, each given its products' buckets and `args(products)`:
    calls of CALL_PRODUCTS products on one server, one a bucket on a Redis Cluster (whose calls
    reach one slot)."""
    groups = (
        list(_by_bucket(ids).values())
        if clustered()
        else [ids[i : i + CALL_PRODUCTS] for i in range(0, len(ids), CALL_PRODUCTS)]
    )
    return [(name, _keys(group), args(group)) for group in groups]


@translated
def names_read(product_ids: Iterable[str], *, client=None) -> dict[str, str]:
    """The names Redis holds of `product_ids`, in one round trip (lua/names_get.lua on one server; an
    HMGET a bucket, each node's at once, on a Redis Cluster); a product it lacks is left out."""
    ids = sorted(set(product_ids))
    if not ids:
        return {}
    if clustered():
        buckets, head = _by_bucket(ids), names_head()
        groups = list(buckets.values())
        commands = [("HMGET", names_key(bucket, head), *group) for bucket, group in buckets.items()]
        replies = scripts_run([], commands=commands, client=client)
    else:
        calls = _calls("names_get", ids, list)
        groups, replies = [group for _, _, group in calls], scripts_run(calls, client=client)
    return {
        product_id: name.decode()
        for group, names in zip(groups, replies, strict=True)
        for product_id, name in zip(group, names, strict=True)
        if name
    }


@translated
def names_mend(held: Mapping[str, str | None], truth: Mapping[str, str | None]) -> tuple[int, list[str]]:
    """Make Redis hold `truth` (the catalogue's names, None for no such product) for each product of
    `held` (what Redis held, read before the catalogue was), where Redis still holds what `held`
    says (lua/names_mend.lua), in one round trip. Returns how many names changed, and the products
    whose names Redis changed meanwhile (left as they are)."""
    calls = _calls(
        "names_mend", list(held), lambda ids: [w for p in ids for w in (p, held[p] or "", truth.get(p) or "")]
    )
    changed, moved = 0, []
    for reply in scripts_run(calls, client=patient()) if calls else []:
        changed += int(reply[0])
        moved += [product_id.decode() for product_id in reply[1:]]
    return changed, moved


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
