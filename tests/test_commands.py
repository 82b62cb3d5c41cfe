"""The engine's management commands: what an operator types, and its exit status."""

import subprocess

import pytest
from django.core.management import CommandError, call_command

from rankings import store
from rankings.shards import shard_count, shard_of

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
    key = store.board_key(1, shard_of("toys", shard_count()), "7d", "units", "toys")
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
