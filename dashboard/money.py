"""Money as the dashboard shows it: the currency and two decimals to read, the ledger's exact
figure (to the micro-unit) where a title or a data value keeps it."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENTS = Decimal("0.01")
MICROS = Decimal("0.000001")


def _plain(amount: Decimal, places: Decimal, *, grouped: bool = False) -> str:
    rounded = Decimal(amount).quantize(places, rounding=ROUND_HALF_UP)
    # A correction can net a figure to -0.000…; that reads as nothing owed, not a credit.
    return format(rounded if rounded else abs(rounded), ",f" if grouped else "f")


def display(amount: Decimal, currency: str) -> str:
    """'USD 5.40', 'USD 3,882.35'."""
    return f"{currency} {_plain(amount, CENTS, grouped=True)}"


def exact(amount: Decimal, currency: str) -> str:
    """'USD 5.400000': as the ledger and the API's usage carry it."""
    return f"{currency} {_plain(amount, MICROS)}"


def number(amount: Decimal) -> str:
    """'5.400000', for a <data value>."""
    return _plain(amount, MICROS)
