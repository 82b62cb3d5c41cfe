"""Money is kept in integer cents, never floats; this is the one way to write it as a decimal."""

from decimal import Decimal


def cents_text(cents: int) -> str:
    """1234 -> "12.34", -5 -> "-0.05": exact, two places, as the API and the pages show money."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def to_cents(amount: Decimal) -> int:
    """An amount with at most two places, in cents (validation has refused anything finer)."""
    return int(amount * 100)
