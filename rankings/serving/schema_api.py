"""The OpenAPI schema of the API, made once per process and served as a read."""

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView


class SchemaApi(SpectacularAPIView):
    """/v1/schema, counted under the "reads" throttle scope.

    Making the schema costs a tenth of a second of CPU or more, and the routes it describes cannot
    change while the process runs: each format is made and written once, then served as bytes.
    The schema takes neither a version nor a language, so no query string makes another one.
    """

    throttle_scope = "reads"
    _schema: dict | None = None
    # The renderer's media type -> (body, content type): one entry per renderer, four at most.
    _written: dict[str, tuple[bytes, str]] = {}

    @extend_schema(**SCHEMA_KWARGS)
    def get(self, request, *args, **kwargs):
        renderer = request.accepted_renderer
        written = self._written.get(renderer.media_type)
        if written is None:
            body = renderer.render(self._made(request), renderer.media_type, self.get_renderer_context())
            charset = f"; charset={renderer.charset}" if renderer.charset else ""
            written = SchemaApi._written[renderer.media_type] = (body, renderer.media_type + charset)
        body, content_type = written
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'inline; filename="{self._get_filename(request, None)}"'
        return response

    def _made(self, request) -> dict:
        if SchemaApi._schema is None:
            generator = self.generator_class(urlconf=self.urlconf, patterns=self.patterns)
            SchemaApi._schema = generator.get_schema(request=request, public=self.serve_public)
        return SchemaApi._schema
