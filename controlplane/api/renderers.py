"""JSON renderer that puts every successful payload under `data`."""

from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response


class EnvelopedResponse(Response):
    """A response whose body is already the envelope (errors, lists with `meta`)."""

    enveloped = True


class EnvelopeJSONRenderer(JSONRenderer):
    """`{"data": ...}` for success; error bodies (built by the exception handler) and bodies a
    view already enveloped (paginated lists with `meta`) pass through untouched."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        response = (renderer_context or {}).get("response")
        if response is not None and getattr(response, "enveloped", False):
            return super().render(data, accepted_media_type, renderer_context)
        if response is not None and response.status_code == 204:
            return b""
        return super().render({"data": data}, accepted_media_type, renderer_context)
