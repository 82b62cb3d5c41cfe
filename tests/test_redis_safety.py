"""Redis may not silently lose a board: no evicting policy, evicted boards found and rebuilt,
a rebuild's swap and blobs in one step, and no leftover temporary keys."""

import logging
import time

import pytest
import redis as redis_lib

from rankings import tasks
from rankings.conf import METRICS, rankings_settings
from rankings.engine import store
from rankings.engine.shards import active, shard_of
from rankings.engine.windows import configured_windows
from rankings.models import PendingSale, VerifyLog
from rankings.operations import verify
from rankings.serving import dashboard as operations

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def _shard(category: str) -> int:
    return shard_of(category, active().layout)


def _policy(value: str) -> None:
    """Set the eviction policy of the test's own Redis (never the shared one)."""
    store.patient().config_set("maxmemory-policy", value)
    store.reset_clients()  # forget the remembered policy, as a new process would


# --- the eviction policy -----------------------------------------------------------


def test_a_tick_refuses_to_run_when_redis_may_evict_boards(own_redis):
    # given a Redis that evicts any key under memory pressure, boards included
    _policy("allkeys-lru")
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    # when the tick starts
    with pytest.raises(store.UnsafeEvictionPolicy) as refused:
        shop.tick()
    # then it refuses with a message that says what to set, and claims nothing
    assert str(refused.value) == (
        "Redis maxmemory-policy is allkeys-lru: boards would be evicted; set noeviction or a volatile-* policy"
    )
    assert PendingSale.objects.count() > 0
    # and the operator's status page shows the danger
    assert operations.operations_read()["redis_safety"]["evictionPolicy"] == "allkeys-lru"
    assert operations.operations_read()["redis_safety"]["evictionSafe"] is False


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_a_tick_runs_under_a_policy_that_never_evicts_a_board(own_redis, policy):
    # given a policy that evicts nothing, or only keys with a TTL (boards have none)
    _policy(policy)
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    # when the tick runs, then it aggregates as usual
    shop.tick()
    assert shop.top() == [("p1", 2)]
    assert operations.operations_read()["redis_safety"]["evictionSafe"] is True


def test_the_policy_is_asked_once_per_interval_and_a_change_is_seen_after_it(own_redis, monkeypatch):
    # given a tick that found a safe policy
    _policy("noeviction")
    shop = Shop()
    shop.tick()
    # when the operator switches to an evicting policy
    store.patient().config_set("maxmemory-policy", "allkeys-random")
    # then the next tick, within the interval, does not ask Redis again
    shop.tick()
    # and once the interval is over, the tick sees the change and refuses
    store.eviction.policies.expire(time.monotonic() + store.EVICTION_CHECK_SECONDS)
    with pytest.raises(store.UnsafeEvictionPolicy, match="allkeys-random"):
        shop.tick()


def test_a_redis_that_hides_config_gets_a_warning_and_ticks(own_redis, settings, caplog):
    # given a managed Redis where the application's user may not run CONFIG
    store.patient().acl_setuser(
        "app", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"], commands=["+@all", "-config"]
    )
    settings.REDIS_URL = settings.REDIS_URL.replace("redis://", "redis://app:secret@")
    store.reset_clients()
    with pytest.raises(redis_lib.exceptions.NoPermissionError):
        store.patient().config_get("maxmemory-policy")
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    # when the tick runs
    with caplog.at_level(logging.WARNING, logger="rankings.engine.store"):
        shop.tick()
    # then it aggregates, and warns that the policy could not be checked
    assert shop.top() == [("p1", 2)]
    assert any("maxmemory-policy" in r.getMessage() for r in caplog.records)
    assert operations.operations_read()["redis_safety"]["evictionSafe"] is None


# --- evicted boards are found and rebuilt ---------------------------------------------


def _shop_with_boards() -> Shop:
    shop = Shop()
    shop.send(
        *[shop.sale(f"p{i % 7}", categories=[("toys", "games")[i % 2]], qty=1 + i % 3) for i in range(30)]
    )
    shop.tick()
    shop.advance(minutes=5)
    shop.tick()
    return shop


def _evict(category: str, window: str = "7d", metric: str = "units") -> None:
    """What Redis does to a key under an allkeys-* policy: it is simply gone."""
    key = store.board_key(store.served_version(), _shard(category), window, metric, category)
    assert store.patient().delete(key) == 1


def test_a_sampled_verify_finds_an_evicted_board_and_rebuilds_its_shard(settings):
    # given exact boards, checked by the periodic sampled verify: nothing to repair
    shop = _shop_with_boards()
    settings.RANKINGS = {**settings.RANKINGS, "VERIFY_SAMPLE_CATEGORIES": 1000}
    tasks.verify_sampled()
    first = VerifyLog.objects.get()
    assert first.boards > 0 and first.repaired == []
    # when Redis evicts one board
    _evict("toys")
    assert not verify.rankings_verify().exact
    # then the next sampled verify (its sample covers the board) rebuilds the board's shard
    tasks.verify_sampled()
    run = VerifyLog.objects.order_by("-at").first()
    assert run.repaired == [_shard("toys")]
    shop.assert_exact()
    # and the repair is counted on the status page
    assert operations.operations_read()["redis_safety"]["repairedShards"] == 1


def test_a_sampled_verify_with_a_small_sample_checks_only_some_categories():
    # given many categories
    shop = Shop()
    shop.send(*[shop.sale("p1", categories=[f"c{i}"]) for i in range(30)])
    shop.tick()
    # when a sampled verify picks three categories
    report = verify.verify_sampled(sample=3)
    # then it compares only their boards (every window and metric of each)
    windows = len(configured_windows())
    assert report.boards == 3 * windows * len(METRICS)


def test_a_sampled_verify_leaves_exact_boards_alone(monkeypatch):
    shop = _shop_with_boards()
    rebuilt = []
    monkeypatch.setattr(verify, "shard_rebuild", lambda **kwargs: rebuilt.append(kwargs))
    report = verify.verify_sampled(sample=1000)
    assert report.boards > 0 and report.repaired == [] and rebuilt == []
    shop.assert_exact()


# --- a rebuild's swap and blobs ---------------------------------------------------------


def test_a_rebuild_swaps_boards_and_rewrites_their_blobs_in_one_step(monkeypatch, redis_client):
    """After every Redis call of a rebuild, each blob agrees with its board (what a reader sees)."""
    version, shard = 1, _shard("toys")
    boards = {("7d", "units", "toys"): {"p1": 5, "p2": 3}, ("7d", "revenue", "toys"): {"p1": 500, "p2": 300}}
    store.shard_replace(version=version, shard=shard, seq=1, as_of=1.0, gen="g", boards=boards)
    real_client = store.patient
    mismatches = []
    scripts = []
    checking = []

    def blobs_agree(label):
        for metric, other in (("units", "revenue"), ("revenue", "units")):
            board = store.board_read_all(store.board_key(version, shard, "7d", metric, "toys"))
            others = dict(store.board_read_all(store.board_key(version, shard, "7d", other, "toys")))
            blob = store.head_read(version, shard, "7d", metric, "toys")
            expected = {"total": len(board), "rows": [[p, s, others.get(p, 0)] for p, s in board]}
            if (blob if board else None) != (expected if board else None):
                mismatches.append((label, metric, board, blob))

    class Watched:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def evalsha(self, *args):
            result = self._inner.evalsha(*args)
            if not checking:  # the check's own reads are scripts too
                checking.append(True)
                scripts.append(args[0])
                blobs_agree("after a script")
                checking.clear()
            return result

    # the write path's client: every call of the rebuild goes through it
    monkeypatch.setattr(store.writes, "patient", lambda: Watched(real_client()))
    # when the shard is rebuilt with other scores
    boards = {("7d", "units", "toys"): {"p2": 9, "p3": 1}, ("7d", "revenue", "toys"): {"p2": 900, "p3": 100}}
    store.shard_replace(version=version, shard=shard, seq=2, as_of=2.0, gen="g", boards=boards)
    # then no reader could have seen a board with a blob of another content
    assert scripts and mismatches == []
    assert store.board_read_all(store.board_key(version, shard, "7d", "units", "toys")) == [
        ("p2", 9),
        ("p3", 1),
    ]


# --- temporary keys ----------------------------------------------------------------------


def _temporary_keys(redis_client) -> list[bytes]:
    # One SCAN step of many keys: a Redis shared with other runs holds hundreds of thousands, and the
    # keys looked for live a second.
    return list(redis_client.scan_iter(f"{rankings_settings.KEY_PREFIX}:*:rebuild:*", count=100_000))


def test_temporary_keys_of_a_rebuild_that_died_expire(settings, monkeypatch, redis_client):
    # given temporary keys that live one second
    settings.RANKINGS = {**settings.RANKINGS, "REBUILD_TEMP_KEY_SECONDS": 1}
    shard = _shard("toys")
    boards = {("7d", "units", "toys"): {"p1": 5}, ("7d", "revenue", "toys"): {"p1": 500}}
    # when a rebuild dies after writing its temporary boards, before swapping them in
    real = store.shard_board_keys

    def die(*args):
        raise SystemExit("the rebuild's process died")

    monkeypatch.setattr(store.writes, "shard_board_keys", die)
    with pytest.raises(SystemExit):
        store.shard_replace(version=1, shard=shard, seq=1, as_of=1.0, gen="g", boards=boards)
    left = _temporary_keys(redis_client)
    assert len(left) == 2 and all(0 < redis_client.ttl(k) <= 1 for k in left)
    # then they are gone once their time is up
    time.sleep(1.5)
    assert _temporary_keys(redis_client) == []
    # and a rebuild that completes (in time: its temporary keys live a minute, so that its look for
    # stale boards on a Redis shared with other runs cannot outlast them) leaves boards (larger than a
    # blob's ranks) and blobs without any TTL
    settings.RANKINGS = {**settings.RANKINGS, "REBUILD_TEMP_KEY_SECONDS": 60}
    monkeypatch.setattr(store.writes, "shard_board_keys", real)
    members = range(store.BLOB_SIZE + 1)
    boards = {board: {f"p{i}": 5 + i for i in members} for board in boards}
    store.shard_replace(version=1, shard=shard, seq=1, as_of=1.0, gen="g", boards=boards)
    board = store.board_key(1, shard, "7d", "units", "toys")
    assert redis_client.ttl(board) == -1
    assert redis_client.ttl(store.blob_key(1, shard, "7d", "units", "toys")) == -1


def test_a_swap_whose_temporary_board_expired_changes_nothing(monkeypatch, redis_client):
    shard = _shard("toys")
    old = {("7d", "units", "toys"): {"p1": 5}}
    store.shard_replace(version=1, shard=shard, seq=1, as_of=1.0, gen="g", boards=old)
    real = store.shard_board_keys

    def expire_one_then_list(*args):
        redis_client.delete(_temporary_keys(redis_client)[0])
        return real(*args)

    monkeypatch.setattr(store.writes, "shard_board_keys", expire_one_then_list)
    new = {("7d", "units", "toys"): {"p2": 9}, ("1d", "units", "toys"): {"p2": 9}}
    with pytest.raises(store.Refused, match="temporary board"):
        store.shard_replace(version=1, shard=shard, seq=2, as_of=2.0, gen="g", boards=new)
    assert store.board_read_all(store.board_key(1, shard, "7d", "units", "toys")) == [("p1", 5)]
    assert store.shard_state(1, shard)["seq"] == "1"
