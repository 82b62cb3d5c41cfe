"""Money written from cents: exact, two places, signed."""

from decimal import Decimal

import pytest

from catalogue.money import cents_text, to_cents


@pytest.mark.parametrize(
    ("cents", "text"),
    [
        (0, "0.00"),
        (5, "0.05"),
        (1234, "12.34"),
        (-5, "-0.05"),
        (-1234, "-12.34"),
        (2**53 - 1, "90071992547409.91"),
    ],
)
def test_cents_are_written_exactly_with_two_places(cents, text):
    assert cents_text(cents) == text
    assert to_cents(Decimal(text)) == cents
