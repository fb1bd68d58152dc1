"""Tenancy's customer resources, declared once for the generic edges
(controlplane/resources.py): SSH keys, API keys and webhooks."""

from __future__ import annotations

from controlplane.resources import Details, Made, Refusal, Resource
from tenancy import services, webhooks
from tenancy.errors import LimitExceeded, SSHKeyConflict
from tenancy.models import Tenant


def _add_ssh_key(tenant: Tenant, data: Details) -> Made:
    return Made(
        services.add_ssh_key(tenant=tenant, name=data["name"], public_key=data["publicKey"])
    )


def _ssh_key_taken(details: Details) -> str:
    if "fingerprint" in details:
        return f"This key is already registered as {details.get('name')}."
    return (
        f"A key named {details.get('name')} exists. Choose another name, or delete that key first."
    )


SSH_KEYS = Resource(
    name="ssh-key",
    label="SSH key",
    plural="SSH keys",
    fields={"name": "name", "publicKey": "public_key"},
    create=_add_ssh_key,
    delete=lambda tenant, name: services.remove_ssh_key(tenant=tenant, name=name),
    created=lambda made: f"SSH key {made.thing.name} added ({made.thing.fingerprint}).",
    deleted=lambda name: f"SSH key {name} deleted.",
    refusals={
        SSHKeyConflict: Refusal(
            _ssh_key_taken, field=lambda d: "publicKey" if "fingerprint" in d else "name"
        ),
        LimitExceeded: Refusal(
            lambda d: (
                f"The tenant holds as many SSH keys as it may ({d.get('hard')}). Delete one it "
                "no longer needs first."
            )
        ),
    },
)


def _create_api_key(tenant: Tenant, data: Details) -> Made:
    api_key, secret = services.create_api_key(tenant=tenant, name=data.get("name", ""), capped=True)
    return Made(api_key, shown_once=secret)


API_KEYS = Resource(
    name="api-key",
    label="API key",
    plural="API keys",
    fields={"name": "name"},
    create=_create_api_key,
    delete=lambda tenant, prefix: services.revoke_tenant_key(tenant=tenant, prefix=prefix),
    key=lambda api_key: api_key.prefix,
    created=lambda made: (
        f"API key {made.thing.prefix} made. Copy it now: it is shown this once, and only its "
        "hash is kept."
    ),
    deleted=lambda prefix: f"API key {prefix} revoked: requests with it are refused from now.",
    missing="{label} {key} was already revoked.",
    refusals={
        LimitExceeded: Refusal(
            lambda d: (
                f"The tenant holds as many active API keys as it may ({d.get('hard')}). Revoke "
                "one it no longer uses first."
            )
        ),
    },
)


def _create_webhook(tenant: Tenant, data: Details) -> Made:
    endpoint = webhooks.create_endpoint(
        tenant=tenant,
        url=data["url"],
        events=data["events"],
        description=data.get("description", ""),
    )
    return Made(endpoint, shown_once=endpoint.secret)


WEBHOOKS = Resource(
    name="webhook",
    label="webhook",
    plural="webhooks",
    fields={"url": "url", "events": "events", "description": "description"},
    create=_create_webhook,
    delete=lambda tenant, uid: webhooks.delete_endpoint(tenant=tenant, uid=uid),
    key=lambda endpoint: str(endpoint.uid),
    created=lambda made: (
        f"Webhook to {made.thing.url} added. Copy its signing secret now: it is shown this once."
    ),
    deleted=lambda uid: "Webhook deleted: nothing more is sent to it.",
    refusals={
        LimitExceeded: Refusal(
            lambda d: (
                f"The tenant has as many webhooks as it may ({d.get('hard')}). Delete one it no "
                "longer needs first."
            )
        ),
    },
)
