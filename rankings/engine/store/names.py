"""The catalogue's product names, copied into Redis: a read that names products at random among
millions (a product's neighbours) finds them in one round trip beside the board's, where
PostgreSQL's query cost it more than the board itself.

A copy: a name Redis lacks is read from the catalogue. Written by a push of products once it
commits, and mended from the catalogue by rankings.engine.names_copy (the names each edit
changed, within seconds; every name, by a walk), which overwrites only what Redis still holds as
it read it before the catalogue (names_mend), so no older read undoes a newer write.

A split board's part keeps a second copy of its members' names in its own slot (part_names_head),
so that on a Redis Cluster the part's own call names the rows it reads, and a product's neighbours
take two round trips, as its rank does, not three. Each such copy is mended with the shared one,
name by name under the same rule; a (head, product) pair names one name of one copy.
"""

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping

from redis.crc import key_slot

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


def part_names_head(version: int, shard: int) -> str:
    """What each bucket's key of the names' copy of a split board's part (on `shard` of `version`)
    begins with: its first hash tag is the shard's, so the keys share the part's slot (and go
    with the version's other keys when it is deleted)."""
    return f"{prefix()}:v{version}:{{s{shard}}}:names:"


def rows_names_head(version: int, shard: int, *, part: bool) -> str:
    """Where a call that reads a board on `shard` of `version` finds its rows' names
    (lua/names_of.lua): on one server, the shared copy; on a Redis Cluster, whose call reaches its
    own slot only, a split board's part's own copy, and none ('') for a whole board."""
    if not clustered():
        return names_head()
    return part_names_head(version, shard) if part else ""


# A name of one copy: (what the copy's keys begin with, the product).
Copy = tuple[str, str]


def _key(copy: Copy) -> str:
    head, product_id = copy
    return names_key(bucket_of(product_id), head)


def names_walk_key() -> str:
    """Where the walk over the catalogue stands (names_walk_read)."""
    return f"{prefix()}:names:walk"


# Names a Lua call reads or mends on one server: Redis answers others between calls.
CALL_PRODUCTS = 2_000


def _groups(copies: list[Copy]) -> list[list[tuple[Copy, str]]]:
    """`copies` with their keys, in groups a call takes, CALL_PRODUCTS at most: on a Redis Cluster,
    whose calls reach one slot, those of one slot (a split board's part's every bucket; a bucket or
    a few of the shared copy)."""
    keyed = [(copy, _key(copy)) for copy in copies]
    if clustered():
        slotted: dict[int, list[tuple[Copy, str]]] = defaultdict(list)
        for copy, key in keyed:
            slotted[key_slot(key.encode())].append((copy, key))
        groups = list(slotted.values())
    else:
        groups = [keyed]
    return [group[i : i + CALL_PRODUCTS] for group in groups for i in range(0, len(group), CALL_PRODUCTS)]


@translated
def names_read(product_ids: Iterable[str], *, client=None) -> dict[str, str]:
    """The names Redis holds of `product_ids`, in one round trip (_names_get); a product it lacks is
    left out."""
    head = names_head()
    found = _names_get([(head, product_id) for product_id in sorted(set(product_ids))], client)
    return {product_id: name for (_, product_id), name in found.items() if name is not None}


def _names_get(copies: list[Copy], client) -> dict[Copy, str | None]:
    """What Redis holds of each name of `copies`, None where it holds nothing, in one round trip
    (_groups: an HMGET for a group of one bucket, lua/names_get.lua for one of several; each
    node's at once on a Redis Cluster)."""
    groups = _groups(copies)
    if not groups:
        return {}
    one_key: list[list[tuple[Copy, str]]] = []
    keys_many: list[list[tuple[Copy, str]]] = []
    for group in groups:
        (one_key if all(key == group[0][1] for _, key in group) else keys_many).append(group)
    commands = [("HMGET", group[0][1], *(product for (_, product), _ in group)) for group in one_key]
    calls = [
        ("names_get", [key for _, key in group], [product for (_, product), _ in group])
        for group in keys_many
    ]
    replies = scripts_run(calls, commands=commands, client=client)
    return {
        copy: name.decode() if name else None
        for group, names in zip(one_key + keys_many, replies, strict=True)
        for (copy, _), name in zip(group, names, strict=True)
    }


@translated
def names_mend(held: Mapping[Copy, str | None], truth: Mapping[str, str | None]) -> tuple[int, list[str]]:
    """Make Redis hold `truth` (the catalogue's names, None for no such product) in each copy of
    `held` (what Redis held, read before the catalogue was), where Redis still holds what `held`
    says (lua/names_mend.lua), in one round trip. Returns how many names changed, and the products
    of which Redis changed a name meanwhile (left as it is)."""
    calls = [
        (
            "names_mend",
            [key for _, key in group],
            [w for copy, _ in group for w in (copy[1], held[copy] or "", truth.get(copy[1]) or "")],
        )
        for group in _groups(list(held))
    ]
    changed, moved = 0, set[str]()
    for reply in scripts_run(calls, client=patient()) if calls else []:
        changed += int(reply[0])
        moved.update(product_id.decode() for product_id in reply[1:])
    return changed, sorted(moved)


@translated
def names_held(copies: Iterable[Copy]) -> dict[Copy, str | None]:
    """What Redis holds of each name of `copies`, None where it holds nothing: the first read of a
    mend."""
    return _names_get(list(dict.fromkeys(copies)), patient())


@translated
def buckets_held(buckets: range, heads: Iterable[str]) -> dict[Copy, str]:
    """Every name Redis holds in `buckets` of each copy of `heads`, in one round trip."""
    heads = list(heads)
    pipe = patient().pipeline(transaction=False)
    for head in heads:
        for bucket in buckets:
            pipe.hgetall(names_key(bucket, head))
    replies = iter(pipe.execute())
    return {
        (head, p.decode()): name.decode()
        for head in heads
        for _ in buckets
        for p, name in next(replies).items()
    }


@translated
def names_walk_read() -> tuple[str, int]:
    """Where the walk stands: the last product id it mended, the next bucket it prunes."""
    product, bucket = patient().hmget(names_walk_key(), ["product", "bucket"])
    return product.decode() if isinstance(product, bytes) else "", int(bucket or 0)


@translated
def names_walk_set(*, product: str, bucket: int) -> None:
    patient().hset(names_walk_key(), mapping={"product": product, "bucket": bucket})
