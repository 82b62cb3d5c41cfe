"""The benchmarks' Redis database: one of their own, so that what a large run leaves behind stays out
of the key scans of `make run` and of the suite."""

import os
from unittest import mock

import pytest

from bench import harness


@pytest.fixture
def environment(monkeypatch, tmp_path):
    """The variables as given, and a developer's .env in a checkout of its own (what reading it
    adds to the environment is undone after the test)."""
    monkeypatch.setattr(harness, "ROOT", tmp_path)

    def given(dot_env: str = "", **variables: str) -> str:
        (tmp_path / ".env").write_text(dot_env)
        for name in ("REDIS_URL", "REDIS_CLUSTER", "READ_DOT_ENV"):
            os.environ.pop(name, None)
        os.environ.update(variables)
        return harness.environment()["REDIS_URL"]

    with mock.patch.dict(os.environ):
        yield given


def test_the_boards_take_the_benchmarks_database_of_the_named_server(environment):
    assert (
        environment(REDIS_URL="redis://:secret@redis.internal:6380/2")
        == "redis://:secret@redis.internal:6380/4"
    )


def test_a_database_named_in_the_query_gives_way_to_the_benchmarks(environment):
    assert environment(REDIS_URL="rediss://redis.internal:6380/0?db=0&ssl_cert_reqs=none") == (
        "rediss://redis.internal:6380/4?ssl_cert_reqs=none"
    )


def test_a_socket_takes_the_benchmarks_database_in_its_query(environment):
    assert environment(REDIS_URL="unix:///run/redis.sock?db=0") == "unix:///run/redis.sock?db=4"


def test_without_a_url_the_default_servers_benchmarks_database(environment):
    assert environment() == "redis://127.0.0.1:6379/4"


def test_a_clusters_node_is_taken_as_it_is(environment):
    assert (
        environment(REDIS_URL="redis://127.0.0.1:7000/0", REDIS_CLUSTER="true") == "redis://127.0.0.1:7000/0"
    )


def test_the_developers_dot_env_is_read_as_the_settings_read_it(environment):
    assert environment("REDIS_URL=redis://127.0.0.1:7000/0\nREDIS_CLUSTER=on\n") == "redis://127.0.0.1:7000/0"


def test_the_dot_env_is_left_alone_with_read_dot_env_off(environment):
    assert environment("REDIS_URL=redis://127.0.0.1:7000/0\nREDIS_CLUSTER=on\n", READ_DOT_ENV="0") == (
        "redis://127.0.0.1:6379/4"
    )


def test_the_environment_wins_over_the_dot_env(environment):
    assert environment("REDIS_URL=redis://127.0.0.1:6390/0\n", REDIS_URL="redis://127.0.0.1:6391/0") == (
        "redis://127.0.0.1:6391/4"
    )
