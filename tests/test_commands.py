"""The engine's management commands: what an operator types, and its exit status."""

import subprocess

import pytest
from django.core.management import CommandError, call_command

from catalogue.models import shard_of
from rankings import store
from rankings.conf import rankings_settings

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
    key = store.board_key(1, shard_of("toys", rankings_settings.SHARDS), "7d", "units", "toys")
    store.client(write=True).zincrby(key, -1, "p2")
    # then verify names the board and the product, and fails
    with pytest.raises(CommandError):
        call_command("rankings_verify")
    out = capsys.readouterr().out
    assert "toys 7d units" in out and "p2: expected 1, Redis 2" in out


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
    shard = shard_of("toys", rankings_settings.SHARDS)
    assert store.client(write=True).delete(store.board_key(1, shard, "7d", "units", "toys")) == 1
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
    shard = shard_of("toys", rankings_settings.SHARDS)
    store.client(write=True).delete(store.board_key(1, shard, "7d", "units", "toys"))
    monkeypatch.setattr("rankings.verify.shard_rebuild", lambda **kwargs: None)
    # when verify repairs, then it reports the difference left and fails
    with pytest.raises(CommandError, match="1 differ"):
        call_command("rankings_verify", "--repair")
    assert "toys 7d units" in capsys.readouterr().out
