"""The order of the collection: the longest tests first on every pytest worker.

With `--dist worksteal` each xdist worker is handed one contiguous share of the
collection, the first worker the first share, and a worker that runs out takes
tests from the end of the longest queue. A long test that starts last keeps its
worker busy while the others stand idle, so the long tests (those below, measured
on a quiet 2-core machine) are dealt out first: each to the share whose long
tests add up to the least so far, at the head of that share, longest first. The
other tests keep their order and fill the shares; a worker that finishes early
takes them from the ends of the others'. Without xdist the long tests simply
come first. The order changes when the tests run, never what they check.
"""

import itertools
import os

# Seconds a test takes on a quiet 2-core machine, by node id up to the test's name (every
# parameter of it alike) or by module (all of the module's tests as one, in their order:
# they share a module's fixture).
LONG_TESTS = {
    "tests/faults/test_worker_faults.py::test_worker_killed_mid_tick_three_times_loses_and_doubles_nothing": 60,
    "tests/test_growth.py::test_a_year_of_history_grows_nothing_but_raw_sales": 53,
    "tests/faults/test_worker_faults.py::test_two_beats_at_once_never_double_apply": 34,
    "tests/faults/test_redis_faults.py::test_redis_paused_reads_answer_stale_with_their_true_as_of": 34,
    "tests/faults/test_replayed_stream.py::test_twenty_thousand_events_replayed_twice_by_four_clients": 32,
    "tests/faults/test_cluster_failover.py": 30,
    "tests/test_prometheus.py": 30,
    "tests/faults/test_redis_faults.py::test_every_key_deleted_mid_stream_is_rebuilt_exactly": 23,
    "tests/test_tick_workers.py::test_a_worker_started_later_takes_the_waiting_shards_without_applying_twice": 23,
    "tests/test_engine_properties.py::test_random_histories_match_the_batch_recompute": 15,
    "tests/faults/test_worker_faults.py::test_tick_connection_terminated_mid_batch": 16,
    "tests/test_celery.py": 16,
    "tests/test_engine_crashes.py::test_four_concurrent_ticks_never_double_apply": 15,
    "tests/test_tick_workers.py::test_two_workers_on_two_queues_tick_disjoint_shards_at_once": 13,
    "tests/test_commands.py::test_rankings_tick_refuses_a_clock_that_goes_backwards": 11,
    "tests/test_admin_operations.py": 10,
    "tests/test_settings_declared.py::test_the_beat_schedule_follows_the_overrides_of_the_engine": 9,
    "tests/test_browser_a11y.py": 11,
    "tests/test_catalogue_api.py::test_a_pushed_name_reaches_another_process_that_remembered_the_old_one": 8,
    "tests/test_engine_properties.py::test_random_tree_edits_going_live_match_the_batch_recompute": 5,
    "tests/test_engine_properties.py::test_random_histories_fire_the_alerts_the_recomputed_snapshots_say": 5,
    "tests/faults/test_out_of_order_commits.py": 20,
    "tests/test_engine_crashes.py::test_kill_9_of_a_running_rankings_tick": 8,
    "tests/test_tick_wake.py::test_a_committed_sale_is_visible_without_a_beat": 7,
    "tests/test_read_memory.py::test_answers_remembered_stay_within_their_bytes_however_limit_and_offset_vary": 7,
    "tests/test_schema.py::test_every_response_is_documented_and_no_input_causes_a_server_error": 4,
}


def _weight(nodeid: str) -> tuple[str, float] | None:
    """The group a test belongs to (its module, or itself) and the group's seconds per test."""
    function = nodeid.split("[", 1)[0]
    if function in LONG_TESTS:
        return nodeid, LONG_TESTS[function]
    module = nodeid.split("::", 1)[0]
    if module in LONG_TESTS:
        return module, LONG_TESTS[module]
    return None


def _share_sizes(count: int, workers: int) -> list[int]:
    """How many tests worksteal hands each worker at the start: the rest over the workers left."""
    sizes, left = [], count
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    return sizes


def longest_first(items: list, workers: int) -> list:
    """`items` reordered: the long tests dealt out over `workers` shares, longest first."""
    groups: dict[str, list] = {}
    seconds: dict[str, float] = {}
    others = []
    for item in items:
        found = _weight(item.nodeid)
        if found is None:
            others.append(item)
            continue
        group, weight = found
        groups.setdefault(group, []).append(item)
        seconds[group] = seconds.get(group, 0) + weight
    shares: list[list] = [[] for _ in range(max(workers, 1))]
    loads = [0.0] * len(shares)
    for group in sorted(groups, key=lambda g: -seconds[g]):
        least = loads.index(min(loads))
        shares[least].extend(groups[group])
        loads[least] += seconds[group]
    ordered = []
    rest = iter(others)
    for share, size in zip(shares, _share_sizes(len(items), len(shares)), strict=True):
        ordered.extend(share)
        ordered.extend(itertools.islice(rest, max(0, size - len(share))))
    ordered.extend(rest)
    return ordered


def workers() -> int:
    """The xdist workers of this run (1 without xdist)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
