"""Product images as uploaded, so that the example needs no thumbnail library (sorl-thumbnail)."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.staticfiles.storage import staticfiles_storage
from oscar.core.thumbnails import AbstractThumbnailer


@dataclass
class Image:
    url: str


class AsUploaded(AbstractThumbnailer):
    """Oscar's thumbnailer interface, answering with the original image (or Oscar's placeholder)."""

    def generate_thumbnail(self, source, **opts):
        if hasattr(source, "url"):
            return Image(source.url)
        if source == settings.OSCAR_MISSING_IMAGE_URL:
            return Image(staticfiles_storage.url("oscar/img/image_not_found.jpg"))
        return Image(settings.MEDIA_URL + str(source))

    def delete_thumbnails(self, source):
        """Nothing was made."""
