"""The inventory's contribution to /api/v1/health: when the mirror was last refreshed."""

from inventory.selectors import get_freshness


def check_inventory() -> dict:
    freshness = get_freshness()
    body = {
        "ok": not freshness.stale,
        "lastSync": freshness.as_of.isoformat() if freshness.as_of else None,
    }
    if freshness.last_error:
        body["error"] = freshness.last_error
    return body
