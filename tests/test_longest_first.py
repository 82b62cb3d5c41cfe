"""The collection's order (tests/longest_first.py): every worker starts on long tests."""

from dataclasses import dataclass

from .longest_first import LONG_TESTS, longest_first

LONG = [name for name in LONG_TESTS if "::" in name]


@dataclass
class Item:
    nodeid: str


def _shares(items: list, workers: int) -> list[list[str]]:
    """The contiguous shares worksteal hands the workers at the start."""
    ids, shares = [item.nodeid for item in items], []
    for remaining in range(workers, 0, -1):
        size = len(ids) // remaining
        shares.append(ids[:size])
        ids = ids[size:]
    return shares


def test_each_workers_share_starts_with_long_tests_longest_first_and_their_seconds_are_even():
    quick = [Item(f"tests/test_quick.py::test_{n}") for n in range(300)]
    long = [Item(name) for name in LONG[:9]]
    items = quick[:100] + long + quick[100:]

    ordered = longest_first(items, 3)

    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)
    shares = _shares(ordered, 3)
    seconds = [sum(LONG_TESTS.get(nodeid, 0) for nodeid in share) for share in shares]
    for share in shares:
        heads = [LONG_TESTS[nodeid] for nodeid in share if nodeid in LONG_TESTS]
        assert share[: len(heads)] == [n for n in share if n in LONG_TESTS]  # at the head
        assert heads == sorted(heads, reverse=True)
    assert max(seconds) - min(seconds) <= max(LONG_TESTS[i.nodeid] for i in long)
    assert all(seconds)
    # and the quick tests keep their order
    assert [i for i in ordered if i in quick] == quick


def test_a_modules_tests_stay_together_in_their_order_and_parameters_count_each():
    module = next(name for name in LONG_TESTS if "::" not in name)
    together = [Item(f"{module}::test_{n}") for n in range(3)]
    function = next(name for name in LONG if "[" not in name)
    params = [Item(f"{function}[{n}]") for n in range(4)]
    items = [Item("tests/test_quick.py::test_a"), *together, *params]

    ordered = longest_first(items, 2)

    ids = [i.nodeid for i in ordered]
    start = ids.index(together[0].nodeid)
    assert ids[start : start + 3] == [i.nodeid for i in together]
    assert set(ids[:7]) >= {i.nodeid for i in params}
    assert ids[-1] == "tests/test_quick.py::test_a"
