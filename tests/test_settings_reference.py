"""docs/settings.md is generated from controlplane/settings.py (devstack/settings_reference.py):
what the generator reads from a settings module, and that the committed page is current."""

from __future__ import annotations

from devstack import settings_reference

SAMPLE = """
env = environ.Env()

# Development mode.
DEBUG = env.bool("DJANGO_DEBUG", default=False)

# The signing key; required in production.
if DEBUG:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="dev")
else:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY")

# Two grouped under one comment (a | in it is escaped).
FIRST = env.int("FIRST", default=60 * 60)
SECOND = env.float("SECOND", 1.5)

UNDOCUMENTED = env.str("UNDOCUMENTED", default="")
RATE = _rate("SOME_RATE", "60/min")
NETWORKS = _networks("SOME_NETWORKS")
NOT_A_SETTING = env.str(name, "")
"""


def test_each_variable_has_its_default_as_written_and_the_comment_of_its_group():
    found = {s.name: s for s in settings_reference.settings(SAMPLE)}
    assert list(found) == [
        "DJANGO_DEBUG",
        "DJANGO_SECRET_KEY",
        "FIRST",
        "SECOND",
        "UNDOCUMENTED",
        "SOME_RATE",
        "SOME_NETWORKS",
    ]
    assert (found["DJANGO_DEBUG"].kind, found["DJANGO_DEBUG"].defaults) == ("bool", ["False"])
    assert found["DJANGO_DEBUG"].meaning == "Development mode."
    assert found["DJANGO_SECRET_KEY"].defaults == ['"dev"', "required"]
    assert found["DJANGO_SECRET_KEY"].meaning == "The signing key; required in production."
    assert found["FIRST"].defaults == ["60 * 60"]
    assert found["SECOND"].defaults == ["1.5"]
    assert found["FIRST"].meaning == found["SECOND"].meaning
    assert found["UNDOCUMENTED"].meaning == ""
    assert (found["SOME_RATE"].kind, found["SOME_RATE"].defaults) == ("rate", ['"60/min"'])
    assert found["SOME_NETWORKS"].defaults == ["empty"]
    page = settings_reference.render(SAMPLE)
    assert "| `SECOND` | float | `1.5` | Two grouped under one comment (a \\| in it" in page
    assert '| `DJANGO_SECRET_KEY` | str | `"dev"` or required |' in page


def test_the_committed_reference_is_what_the_settings_say():
    assert settings_reference.main(["--check"]) == 0
    source = settings_reference.SOURCE.read_text()
    assert settings_reference.TARGET.read_text() == settings_reference.render(source)
    # Every variable the product reads is on the page.
    for name in ("DATABASE_URL", "CLUSTER_CREDENTIALS_DIR", "WEBHOOK_DNS_TIMEOUT_SECONDS"):
        assert f"| `{name}` |" in settings_reference.TARGET.read_text()
