"""The engine's management commands: what an operator types, and its exit status."""

import datetime as dt
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.shards import active, shard_of
from rankings.models import ShardState

from .processes import django_env, manage
from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def test_rankings_verify_passes_on_exact_boards_and_fails_on_a_tampered_one(capsys):
    # given exact boards
    shop = Shop()
    shop.send(shop.sale("p1", qty=3), shop.sale("p2", qty=1))
    shop.tick()
    call_command("rankings_verify")
    assert "exact" in capsys.readouterr().out
    # when one score in Redis is changed behind the engine's back
    key = store.board_key(1, shard_of("toys", active().layout), "7d", "units", "toys")
    store.patient().zincrby(key, -1, "p2")
    # then verify names the board and the product, and fails
    with pytest.raises(CommandError):
        call_command("rankings_verify")
    out = capsys.readouterr().out
    assert "toys 7d units" in out and "p2: expected 1, Redis 2" in out


@pytest.mark.processes
def test_rankings_tick_refuses_a_clock_that_goes_backwards():
    shop = Shop()
    shop.tick()
    earlier = shop.now.replace(year=shop.now.year - 1).isoformat()

    child = manage("rankings_tick", "--now", earlier, env=django_env(), stderr=subprocess.PIPE, text=True)
    _, err = child.communicate(timeout=60)

    assert child.returncode == 1
    assert "before the last tick" in err


def test_rankings_verify_repair_rebuilds_a_shard_whose_board_was_evicted(capsys):
    # given exact boards, then one board evicted by Redis
    shop = Shop()
    shop.send(shop.sale("p1", qty=3), shop.sale("p2", qty=1), shop.sale("p3", categories=["games"]))
    shop.tick()
    shard = shard_of("toys", active().layout)
    assert store.patient().delete(store.board_key(1, shard, "7d", "units", "toys")) == 1
    # when verify runs with --repair
    call_command("rankings_verify", "--repair")
    # then it names the shard it rebuilt, the boards are exact again, and a plain verify agrees
    out = capsys.readouterr().out
    assert f"repaired shard {shard}" in out and "exact" in out
    call_command("rankings_verify")
    assert shop.top() == [("p1", 3), ("p2", 1)]


def test_rankings_verify_repair_fails_when_the_rebuild_does_not_make_the_boards_exact(capsys, monkeypatch):
    # given a board that a rebuild from the buckets cannot mend (here: the rebuild does nothing)
    shop = Shop()
    shop.send(shop.sale("p1", qty=3))
    shop.tick()
    shard = shard_of("toys", active().layout)
    store.patient().delete(store.board_key(1, shard, "7d", "units", "toys"))
    monkeypatch.setattr("rankings.operations.verify.shard_rebuild", lambda **kwargs: None)
    # when verify repairs, then it reports the difference left and fails
    with pytest.raises(CommandError, match="1 differ"):
        call_command("rankings_verify", "--repair")
    assert "toys 7d units" in capsys.readouterr().out


def _recent_shop() -> Shop:
    """A shop whose clock is the wall clock (a minute ago), as the commands' defaults are."""
    return Shop(now=timezone.now().replace(microsecond=0) - dt.timedelta(minutes=1))


def test_rankings_tick_refuses_a_now_far_ahead_of_the_clock():
    """A --now more than MAX_FUTURE_SECONDS ahead of the wall clock is refused and changes nothing."""
    shop = _recent_shop()
    shop.send(shop.sale("p1", qty=3))
    ahead = timezone.now() + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS + 60)

    with pytest.raises(CommandError, match="ahead of the clock.*--allow-future"):
        call_command("rankings_tick", "--now", ahead.isoformat())

    assert not ShardState.objects.filter(as_of__isnull=False).exists()


def test_rankings_tick_accepts_a_near_future_and_a_far_one_with_allow_future(capsys):
    shop = _recent_shop()
    shop.send(shop.sale("p1", qty=3))
    near = timezone.now() + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS - 60)
    call_command("rankings_tick", "--now", near.isoformat())
    call_command("rankings_tick", "--now", "2099-01-01T00:00:00Z", "--allow-future")
    assert set(ShardState.objects.values_list("as_of", flat=True)) == {dt.datetime(2099, 1, 1, tzinfo=dt.UTC)}
    assert shop.top() == []


def test_a_clock_that_jumped_to_2099_is_reset_and_ticks_resume_exactly(capsys):
    """After a tick at 2099 emptied every window, rankings_clock_reset puts every shard back at the
    wall clock and rebuilds its boards from the buckets; the boards are exact and ticks resume."""
    # given boards, then a tick far in the future
    shop = _recent_shop()
    shop.send(shop.sale("p1", qty=3), shop.sale("p2", qty=1, categories=["toys", "games"]))
    call_command("rankings_tick")
    before = shop.top()
    call_command("rankings_tick", "--now", "2099-01-01T00:00:00Z", "--allow-future")
    assert shop.top() == []
    with pytest.raises(CommandError, match="before the last tick"):
        call_command("rankings_tick")
    # when the operator resets the clock
    call_command("rankings_clock_reset")
    # then the boards are back and exact
    assert "reset" in capsys.readouterr().out
    assert shop.top() == before == [("p1", 3), ("p2", 1)]
    assert shop.top("games") == [("p2", 1)]
    shop.assert_exact()
    # and later sales and ticks work
    shop.now = timezone.now().replace(microsecond=0)
    shop.send(shop.sale("p2", qty=5))
    call_command("rankings_tick")
    assert shop.top() == [("p2", 6), ("p1", 3)]
    shop.assert_exact()


def test_rankings_clock_reset_to_a_given_instant():
    """--to puts every shard at that instant: the boards hold what the windows held then."""
    shop = _recent_shop()
    shop.send(shop.sale("p1", qty=3, ago=dt.timedelta(hours=3)), shop.sale("p2", qty=1))
    call_command("rankings_tick")
    call_command("rankings_tick", "--now", "2099-01-01T00:00:00Z", "--allow-future")
    # the last second of the hour before p2's: p2 is in no window yet, p1 only in the hour-bucket ones
    to = shop.now.replace(minute=0, second=0) - dt.timedelta(seconds=1)
    call_command("rankings_clock_reset", "--to", to.isoformat())
    assert set(ShardState.objects.values_list("as_of", flat=True)) == {to}
    assert shop.top(window="1h") == []
    assert shop.top(window="1d") == [("p1", 3)]
    shop.assert_exact()
