"""The only package that talks to Redis. Its modules, by concern:

    client    connections, the store's errors, the Lua scripts of lua/ (one file each, its
              KEYS/ARGV contract at its top; shared pieces put in by `--! include name`)
    keys      every key's name
    eviction  the check that Redis will never evict a board
    versions  the readers' pointer to the active version, layouts, generations, removal
    wake      wake marks of the tick groups
    writes    the write path: batches applied exactly once, rebuilt boards swapped in
    reads     the read path: slices, heads, ranks, small boards whole, thresholds
    parts     the reads a merge of a split board's parts needs
    names     the catalogue's product names, copied for the reads that name products at random
    survey    the operators' reads: what a version holds, board by board
    health    whether Redis answers and how full it is (the probes' and the metrics' reads)

Callers import the package (`from rankings.engine import store`) and call `store.<name>`.

Layout, for key prefix P, version V and shard S (the hash tag keeps a shard's
keys on one Redis Cluster slot, so a batch can be applied atomically):

    P:active                         hash: version that serves reads, epoch
                                     (the switch that made it active), names (raised
                                     by every push of catalogue names: readers
                                     forget the names they remember)
    P:vV:gen                         generation marker; missing = Redis lost data
    P:vV:shards                      the version's layout, for readers: its shard
                                     count, then its pinned categories ("5,toys")
    P:vV:{sS}:state                  hash: seq (last applied batch), asof, gen;
                                     from:K (a version laid out unlike the active
                                     one: the last batch of the active layout's
                                     shard K replayed into it)
                                     (asof is the shard's as_of, epoch seconds; the
                                     field keeps its stored name so a running
                                     deployment's state stays readable)
    P:vV:{sS}:b:<window>:<metric>:<category>
                                     the board: a sorted set, product -> -score
    P:vV:{sS}:t:<window>:<metric>:<category>
                                     the board's first BLOB_SIZE ranks as one JSON
                                     string, rewritten in the same Lua call that
                                     changes the board, so reading them is one GET
    P:vV:{sS}:b:…:rebuild:<token>    a rebuild's temporary board until it is swapped
                                     in; it expires, so a rebuild that dies leaves none
    P:vV:{sS}:names:{nK}             a split board's part on shard S: its members'
                                     names, as P:names:{nK} (the hash tag that counts
                                     is the first, the shard's), so that on a Redis
                                     Cluster the part's own call names its rows
    P:names:{nK}                     hash: product -> its name in the catalogue, for
                                     the products whose id's SHA-1 falls in bucket K
                                     (of NAMES_BUCKETS); versionless, a copy that
                                     reads fall back from (store/names.py)
    P:names:walk                     hash: where the walk that mends the copy stands

On a Redis Cluster (REDIS_CLUSTER) the keys of one shard share its slot, so
every Lua call stays on one node; the keys without a shard (active, gen,
shards) are never in a call with a shard's keys. Reads of several shards are
pipelines, which the cluster client sends to each node at once (script calls
too: client.scripts_run), and SCANs visit every primary.

Scores are stored negated so that ZRANGE (ascending) yields score descending
with equal scores by productId ascending in byte order: exactly the ranking
order, with no composite score and no loss of integer precision. A product
whose score is not positive is removed from the board.
"""

from rankings.engine.store.client import (
    FAST_TIMEOUT,
    PATIENT_TIMEOUT,
    REMEMBERED_PREFIXES,
    Refused,
    StoreError,
    Unreachable,
    UnsafeEvictionPolicy,
    clustered,
    fast,
    patient,
    reset_clients,
)
from rankings.engine.store.eviction import (
    EVICTION_CHECK_SECONDS,
    eviction_policy,
    eviction_policy_check,
    eviction_policy_safe,
)
from rankings.engine.store.health import NodeMemory, memory_used, ping
from rankings.engine.store.keys import (
    BLOB_SIZE,
    TEMP_MARK,
    active_key,
    blob_key,
    board_key,
    gen_key,
    prefix,
    shard_tag,
    shards_key,
    state_key,
    wake_key,
)
from rankings.engine.store.names import (
    NAMES_BUCKETS,
    buckets_held,
    names_head,
    names_held,
    names_mend,
    names_read,
    names_walk_read,
    names_walk_set,
    part_names_head,
)
from rankings.engine.store.parts import (
    PartAround,
    PartBefore,
    PartRows,
    parts_around,
    parts_before,
    parts_histogram,
    parts_ranges,
    parts_rows,
    split_around,
)
from rankings.engine.store.reads import (
    BoardCopy,
    BoardSlice,
    MemberAround,
    MemberRank,
    MembersOnBoard,
    Thresholds,
    board_copy,
    board_heads,
    board_slice,
    board_thresholds,
    member_around,
    member_rank,
    members_on_board,
    members_ranks,
    members_scores,
    ordered_before,
    shard_as_of,
    shard_stamp,
    shards_as_of,
)
from rankings.engine.store.survey import (
    board_read_all,
    boards_heads,
    boards_spot_read,
    boards_summary,
    head_read,
    memory_by_window,
)
from rankings.engine.store.versions import (
    ACTIVE_VERSION_TTL,
    SCAN_COUNT,
    active_ensure,
    active_set,
    generation,
    generation_get,
    keys_delete,
    keyspace_survey,
    names_changed,
    names_stamp,
    pipeline,
    served_version,
    shard_layout_get,
    shard_layout_set,
    version_delete,
)
from rankings.engine.store.wake import (
    wake_claim,
    wake_release,
)
from rankings.engine.store.writes import (
    REBUILD_CHUNK,
    BoardsLoad,
    Change,
    batch_apply,
    batch_apply_routed,
    boards_swap,
    shard_board_keys,
    shard_open,
    shard_replace,
    shard_sources,
    shard_sources_set,
    shard_state,
    shard_touch,
)

__all__ = [
    "ACTIVE_VERSION_TTL",
    "BLOB_SIZE",
    "BoardCopy",
    "BoardSlice",
    "BoardsLoad",
    "Change",
    "EVICTION_CHECK_SECONDS",
    "FAST_TIMEOUT",
    "MemberAround",
    "MemberRank",
    "MembersOnBoard",
    "NodeMemory",
    "PATIENT_TIMEOUT",
    "PartAround",
    "PartBefore",
    "PartRows",
    "REBUILD_CHUNK",
    "REMEMBERED_PREFIXES",
    "Refused",
    "SCAN_COUNT",
    "StoreError",
    "TEMP_MARK",
    "Thresholds",
    "Unreachable",
    "UnsafeEvictionPolicy",
    "active_ensure",
    "active_key",
    "active_set",
    "served_version",
    "batch_apply",
    "batch_apply_routed",
    "blob_key",
    "board_copy",
    "board_heads",
    "board_key",
    "board_read_all",
    "board_slice",
    "board_thresholds",
    "boards_heads",
    "boards_spot_read",
    "boards_summary",
    "boards_swap",
    "clustered",
    "eviction_policy",
    "eviction_policy_check",
    "eviction_policy_safe",
    "fast",
    "gen_key",
    "generation",
    "generation_get",
    "head_read",
    "keys_delete",
    "names_changed",
    "NAMES_BUCKETS",
    "buckets_held",
    "names_head",
    "names_held",
    "names_mend",
    "names_read",
    "part_names_head",
    "names_walk_read",
    "names_walk_set",
    "names_stamp",
    "keyspace_survey",
    "member_around",
    "member_rank",
    "members_on_board",
    "members_ranks",
    "members_scores",
    "memory_by_window",
    "memory_used",
    "ordered_before",
    "parts_around",
    "parts_before",
    "split_around",
    "parts_histogram",
    "parts_ranges",
    "parts_rows",
    "patient",
    "ping",
    "pipeline",
    "prefix",
    "reset_clients",
    "shard_as_of",
    "shard_board_keys",
    "shard_layout_get",
    "shard_layout_set",
    "shard_open",
    "shard_replace",
    "shard_sources",
    "shard_sources_set",
    "shard_stamp",
    "shard_state",
    "shard_tag",
    "shards_as_of",
    "shard_touch",
    "shards_key",
    "state_key",
    "version_delete",
    "wake_claim",
    "wake_key",
    "wake_release",
]
