"""Template tags for money: `{% money amount %}` in the ledger's currency."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.conf import settings
from django.utils.html import format_html

from dashboard import money as formats

register = template.Library()


@register.simple_tag
def money(amount: Decimal) -> str:
    """'USD 5.40' to read, the exact figure in its title and value (a screen reader reads the
    text; a pointer shows the rest)."""
    currency = settings.BILLING_CURRENCY
    return format_html(
        '<data class="money" value="{}" title="{}">{}</data>',
        formats.number(amount),
        formats.exact(amount, currency),
        formats.display(amount, currency),
    )
