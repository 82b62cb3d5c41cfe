"""An event in its usual form is read in one pass (`plain`); whatever that pass takes, the fields take
the same way, to the same data: random events, most of them nearly valid, compared one by one. A batch
of views read a field at a time (`plain_all`) is read as `plain` reads each of its events."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankings.conf import rankings_settings
from rankings.ingest.events import EngagementEventSerializer, EventValidator, SaleEventSerializer, Seen

MISSING = object()

ids = st.one_of(
    st.sampled_from(
        ["o-1", "o-2", "", " ", "a" * 128, "a" * 129, "x\x00y", "e\u202eid", "é", "ok\n", "ab\t"]
    ),
    st.text(max_size=140),
    st.none(),
    st.integers(),
)
instants = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, 1, 1_760_000_000, 1_760_000_000.5, -1, True, False, 2**70, 1e300]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1760000000", "2026-10-11T09:00:00Z", "2026-10-11T09:00:00", "", "soon"]),
    st.none(),
)
products = st.one_of(
    st.sampled_from(["p1", "p2", "P.9_x:y-z", ".", "..", "", "a" * 64, "a" * 65, "p 1", "p1\n", "ü"]),
    st.text(max_size=70),
    st.integers(),
    st.none(),
)
slugs = st.one_of(
    st.sampled_from(["toys", "games", "all", "ALL", "a" * 50, "a" * 51, "to ys", "toys\n", "", "ü"]),
    st.text(max_size=55),
    st.integers(),
    st.none(),
    st.lists(st.just("toys"), max_size=1),
)
categories = st.one_of(st.lists(slugs, max_size=12), st.none(), st.just("toys"), st.integers())
quantities = st.one_of(
    st.integers(min_value=-1_000_002, max_value=1_000_002),
    st.sampled_from([0, 1, -1, 1_000_000, -1_000_000, True, False, 1.0, "1"]),
    st.none(),
)
amounts = st.one_of(
    st.sampled_from(
        ["25.00", "25.0", "25.", ".5", "0", "1e3", " 1.00", "1.001", "-1", "", "١٢", "999999999999.99"]
    ),
    st.sampled_from(["1000000000000", "1_000", "NaN", "Infinity"]),
    st.from_regex(r"\A[0-9]{0,14}(\.[0-9]{0,3})?\Z"),
    st.integers(min_value=-5, max_value=10**13),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
)
kinds = st.one_of(st.sampled_from(["view", "wish", "View", "buy", ""]), st.none(), st.integers())


def _event(valid: dict, odd: dict) -> st.SearchStrategy:
    """Events made valid, then given an odd value in a field or two, or a field left out."""
    base = st.fixed_dictionaries(valid)
    changes = st.dictionaries(st.sampled_from(sorted(odd)), st.none(), max_size=2).flatmap(
        lambda chosen: st.fixed_dictionaries(
            {name: st.one_of(st.just(MISSING), odd[name]) for name in chosen}
        )
    )

    def changed(pair):
        event, change = pair
        event = dict(event)
        for name, value in change.items():
            if value is MISSING:
                event.pop(name, None)
            else:
                event[name] = value
        return event

    return st.tuples(base, changes).map(changed)


good_slugs = st.lists(st.sampled_from(["toys", "games", "a" * 50, "Toys_2-b"]), max_size=5)
sale_events = _event(
    {
        "id": st.sampled_from(["o-1", "o-2", "a" * 128]),
        "ts": st.one_of(st.integers(min_value=0, max_value=2**33), st.floats(min_value=0, max_value=2e9)),
        "productId": st.sampled_from(["p1", "p2", "P.9_x:y-z", "a" * 64]),
        "categories": good_slugs,
        "qty": st.integers(min_value=1, max_value=1_000_000),
        "amount": st.sampled_from(["25.00", "0", ".5", "999999999999.99", "12."]),
    },
    {
        "id": ids,
        "ts": instants,
        "productId": products,
        "categories": categories,
        "qty": quantities,
        "amount": amounts,
        "returnOf": st.one_of(ids, st.just("o-1")),
    },
)
engagement_events = _event(
    {
        "ts": st.one_of(st.integers(min_value=0, max_value=2**33), st.floats(min_value=0, max_value=2e9)),
        "productId": st.sampled_from(["p1", "p2", "P.9_x:y-z", "a" * 64]),
        "categories": good_slugs,
        "kind": st.sampled_from(["view", "wish"]),
    },
    {"id": ids, "ts": instants, "productId": products, "categories": categories, "kind": kinds},
)


def _fields_answer(serializer_class, event):
    """What the fields alone make of `event`: (data, None) or (None, the reason)."""
    validator = EventValidator(serializer_class)
    validator._plain = None
    return validator(event)


def _same_as_fields(serializer_class, batch: list[dict]) -> int:
    """Checks every event `plain` takes against the fields' answer; returns how many it took."""
    serializer = serializer_class()
    seen = Seen(serializer._categories_most)
    taken = 0
    for event in batch:
        data = serializer.plain(event, seen)
        if data is not None:
            taken += 1
            assert _fields_answer(serializer_class, event) == (data, None), event
            assert list(data) == [name for name in serializer.fields if name in data], "the fields' key order"
    return taken


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sale_events, max_size=8))
def test_a_sale_taken_in_one_pass_is_what_the_fields_make_of_it(batch):
    _same_as_fields(SaleEventSerializer, batch)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(engagement_events, max_size=8))
def test_a_view_taken_in_one_pass_is_what_the_fields_make_of_it(batch):
    _same_as_fields(EngagementEventSerializer, batch)


@pytest.mark.parametrize(
    "serializer_class, event",
    [
        (
            SaleEventSerializer,
            {"id": "o-1", "ts": 1_760_000_000, "productId": "p1", "qty": 2, "amount": "25.00"},
        ),
        (
            SaleEventSerializer,
            {"id": "o-1", "ts": 1_760_000_000.5, "productId": "p1", "categories": ["toys"], "qty": 1},
        ),
        (
            SaleEventSerializer,
            {"id": "r-1", "ts": 1_760_000_000, "productId": "p1", "qty": -1, "returnOf": "o-1"},
        ),
        (
            EngagementEventSerializer,
            {"ts": 1_760_000_000, "productId": "p1", "categories": ["toys"], "kind": "view"},
        ),
        (EngagementEventSerializer, {"id": None, "ts": 1_760_000_000, "productId": "p1", "kind": "wish"}),
    ],
)
def test_the_usual_forms_are_taken_in_one_pass(serializer_class, event):
    assert _same_as_fields(serializer_class, [event, dict(event)]) == 2


def test_what_one_event_showed_valid_does_not_let_a_bool_or_a_bad_value_through():
    """The batch's memory of checked values is keyed by value: True equals 1, and must not pass as it."""
    events = [
        {"id": "a", "ts": 1, "productId": "p1", "categories": ["toys"], "qty": 1},
        {"id": "b", "ts": True, "productId": "p1", "categories": ["toys"], "qty": 1},
        {"id": "c", "ts": 1.0, "productId": "p1", "categories": ["all"], "qty": 1},
        {"id": "d", "ts": 1, "productId": ["p1"], "qty": 1},
    ]
    serializer = SaleEventSerializer()
    seen = Seen(serializer._categories_most)
    assert [serializer.plain(event, seen) is not None for event in events] == [True, False, False, False]


MOST = rankings_settings.MAX_EVENT_CATEGORIES
ODD = {
    "id": ["", " ", "a" * 128, "a" * 129, "x\x00y", "e\u202eid", "é", "ok\n", "ab\t", None, 7, ["o-1"]],
    "ts": [
        0,
        -1,
        1.5,
        True,
        False,
        2**70,
        1e300,
        float("nan"),
        float("inf"),
        "1760000000",
        "2026-10-11T09:00:00Z",
        "2026-10-11T09:00:00",
        "",
        None,
        [1],
    ],
    "productId": ["P.9_x:y-z", ".", "..", "", "a" * 64, "a" * 65, "p 1", "p1\n", "ü", 5, None, ["p1"]],
    "categories": [
        [],
        None,
        ["toys", "toys"],
        ["all"],
        ["ALL"],
        ["a" * 50],
        ["a" * 51],
        ["to ys"],
        ["toys\n"],
        [""],
        ["ü"],
        [5],
        [None],
        [["toys"]],
        "toys",
        5,
        ["c"] * (MOST + 1),
        [f"c{i}" for i in range(MOST)],
        [f"c{i}" for i in range(MOST + 1)],
    ],
    "qty": [0, 1, -1, 1_000_000, 1_000_001, -1_000_000, -1_000_001, True, False, 1.0, "1", None],
    "amount": [
        "25.00",
        "25.0",
        "25.",
        ".5",
        "0",
        "1e3",
        " 1.00",
        "1.00 ",
        "1.001",
        "-1",
        "",
        "١٢",
        "999999999999.99",
        "1000000000000",
        "1_000",
        "NaN",
        "Infinity",
        5,
        5.5,
        -1,
        True,
        None,
        ["1"],
    ],
    "returnOf": ["o-1", "", None, "a" * 129, "x\x00", 5],
    "kind": ["view", "wish", "View", "buy", "", None, 1, ["view"]],
}


@pytest.mark.parametrize(
    "serializer_class, valid",
    [
        (
            SaleEventSerializer,
            {"id": "o-9", "ts": 1_760_000_000, "productId": "p1", "categories": ["toys"], "qty": 1},
        ),
        (
            SaleEventSerializer,
            {"id": "r-9", "ts": 1_760_000_000, "productId": "p1", "qty": -1, "returnOf": "o-1"},
        ),
        (EngagementEventSerializer, {"id": "v-9", "ts": 1_760_000_000, "productId": "p1", "kind": "view"}),
    ],
)
def test_each_odd_value_of_each_field_is_taken_as_the_fields_take_it(serializer_class, valid):
    fields = serializer_class().fields
    events = [valid | {name: value} for name, values in ODD.items() if name in fields for value in values]
    events += [{name: value for name, value in valid.items() if name != left_out} for left_out in valid]
    _same_as_fields(serializer_class, events)


def _same_as_one_by_one(batch: list) -> bool:
    """Checks `plain_all` of a batch of views against `plain` of each event; returns whether it took it."""
    serializer = EngagementEventSerializer()
    copies = [dict(event) if isinstance(event, dict) else event for event in batch]
    every = serializer.plain_all(copies, Seen(serializer._categories_most))
    seen = Seen(serializer._categories_most)
    one_by_one = [serializer.plain(event, seen) if isinstance(event, dict) else None for event in batch]
    if None in one_by_one:
        assert every is None, batch
        return False
    assert every == one_by_one, batch
    assert [list(data) for data in every] == [list(data) for data in one_by_one], "the fields' key order"
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(engagement_events, min_size=1, max_size=8))
def test_a_batch_of_views_read_a_field_at_a_time_is_read_as_each_event_is(batch):
    _same_as_one_by_one(batch)


@pytest.mark.parametrize("name", ["id", "ts", "productId", "categories", "kind"])
def test_one_odd_value_in_a_batch_of_views_sends_it_one_event_at_a_time(name):
    """Every odd value of every field, alone in a batch of valid views, fails the batch's one pass,
    or is taken as the event's own pass takes it; a field left out too."""
    valid = {
        "id": "v-9",
        "ts": 1_760_000_000,
        "productId": "p1",
        "categories": ["toys", "toys"],
        "kind": "view",
    }
    taken = [_same_as_one_by_one([valid, valid | {name: value}, valid]) for value in ODD[name]]
    taken.append(_same_as_one_by_one([valid, {k: v for k, v in valid.items() if k != name}]))
    assert False in taken and True in taken
    assert _same_as_one_by_one([valid, 5]) is False
    # True equals 1 and False 0, in a set too: each must be told by its type.
    assert _same_as_one_by_one([{**valid, "ts": 1}, {**valid, "ts": True}]) is False
    assert _same_as_one_by_one([{**valid, "ts": 0.0}, {**valid, "ts": False}]) is False
