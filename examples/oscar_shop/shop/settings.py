"""The example shop: a minimal django-oscar project whose orders and catalogue flow into salesrank.

Everything a shop adds for salesrank is marked "salesrank:" below; the rest is Oscar's own
getting-started configuration. Values come from the environment, with defaults for `make oscar`.
"""

import os
from pathlib import Path

from oscar.defaults import *  # noqa: F403

BASE_DIR = Path(__file__).resolve().parent

# `make oscar` writes the shop's salesrank token into examples/oscar_shop/.env (KEY=value lines); the
# environment wins over it.
_dotenv = BASE_DIR.parent / ".env"
for _line in _dotenv.read_text().splitlines() if _dotenv.exists() else []:
    _name, _, _value = _line.partition("=")
    if _name.strip() and not _name.startswith("#"):
        os.environ.setdefault(_name.strip(), _value.strip())

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-shop-not-for-production")
DEBUG = os.environ.get("SHOP_DEBUG", "false").lower() == "true"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sites",
    "django.contrib.flatpages",
    "oscar.config.Shop",
    "oscar.apps.analytics.apps.AnalyticsConfig",
    "oscar.apps.checkout.apps.CheckoutConfig",
    "oscar.apps.address.apps.AddressConfig",
    "oscar.apps.shipping.apps.ShippingConfig",
    "oscar.apps.catalogue.apps.CatalogueConfig",
    "oscar.apps.catalogue.reviews.apps.CatalogueReviewsConfig",
    "oscar.apps.communication.apps.CommunicationConfig",
    "oscar.apps.partner.apps.PartnerConfig",
    "oscar.apps.basket.apps.BasketConfig",
    "oscar.apps.payment.apps.PaymentConfig",
    "oscar.apps.offer.apps.OfferConfig",
    "oscar.apps.order.apps.OrderConfig",
    "oscar.apps.customer.apps.CustomerConfig",
    "oscar.apps.search.apps.SearchConfig",
    "oscar.apps.voucher.apps.VoucherConfig",
    "oscar.apps.wishlists.apps.WishlistsConfig",
    "oscar.apps.dashboard.apps.DashboardConfig",
    "oscar.apps.dashboard.reports.apps.ReportsDashboardConfig",
    "oscar.apps.dashboard.users.apps.UsersDashboardConfig",
    "oscar.apps.dashboard.orders.apps.OrdersDashboardConfig",
    "oscar.apps.dashboard.catalogue.apps.CatalogueDashboardConfig",
    "oscar.apps.dashboard.offers.apps.OffersDashboardConfig",
    "oscar.apps.dashboard.partners.apps.PartnersDashboardConfig",
    "oscar.apps.dashboard.pages.apps.PagesDashboardConfig",
    "oscar.apps.dashboard.ranges.apps.RangesDashboardConfig",
    "oscar.apps.dashboard.reviews.apps.ReviewsDashboardConfig",
    "oscar.apps.dashboard.vouchers.apps.VouchersDashboardConfig",
    "oscar.apps.dashboard.communications.apps.CommunicationsDashboardConfig",
    "oscar.apps.dashboard.shipping.apps.ShippingDashboardConfig",
    "widget_tweaks",
    "haystack",
    "treebeard",
    "django_tables2",
    # salesrank: the outbox, the commands and the template tags.
    "salesrank_oscar",
    # This shop's demo data (its templates are found through TEMPLATES' DIRS).
    "shop",
]
SITE_ID = 1

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Oscar's stylesheets and scripts, served by the shop's own processes (no collectstatic).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "oscar.apps.basket.middleware.BasketMiddleware",
    "django.contrib.flatpages.middleware.FlatpageFallbackMiddleware",
]
AUTHENTICATION_BACKENDS = [
    "oscar.apps.customer.auth_backends.EmailBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # This shop's templates first: they extend Oscar's pages of the same name.
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.template.context_processors.i18n",
                "django.contrib.messages.context_processors.messages",
                "oscar.apps.search.context_processors.search_form",
                "oscar.apps.checkout.context_processors.checkout",
                "oscar.apps.communication.notifications.context_processors.notifications",
                "oscar.core.context_processors.metadata",
            ],
        },
    },
]

# Oscar recommends ATOMIC_REQUESTS: a checkout is one transaction, the outbox's rows with it.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("SHOP_DATABASE_NAME", "oscar_shop"),
        "HOST": os.environ.get("SHOP_DATABASE_HOST", ""),
        "USER": os.environ.get("SHOP_DATABASE_USER", ""),
        "ATOMIC_REQUESTS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

# Each process keeps its own cache; a shop with several servers would use Redis or memcached.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
HAYSTACK_CONNECTIONS = {"default": {"ENGINE": "haystack.backends.simple_backend.SimpleEngine"}}

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
WHITENOISE_USE_FINDERS = True
MEDIA_URL = "/media/"
MEDIA_ROOT = BASE_DIR / "media"

# The order confirmations go to the shop's log: the example has no mail server.
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

OSCAR_SHOP_NAME = "Example shop"
OSCAR_DEFAULT_CURRENCY = "GBP"
OSCAR_ALLOW_ANON_CHECKOUT = True
# Product images are shown as uploaded: the example needs no thumbnail library.
OSCAR_THUMBNAILER = "shop.thumbnails.AsUploaded"
OSCAR_INITIAL_ORDER_STATUS = OSCAR_INITIAL_LINE_STATUS = "Pending"
OSCAR_ORDER_STATUS_PIPELINE = {
    "Pending": ("Being processed", "Cancelled"),
    "Being processed": (),
    "Cancelled": (),
}

# salesrank: where it listens and the token the shop sends with (a user with the permissions
# rankings.add_sale, catalogue.change_product and catalogue.change_category: `manage.py ingest_token
# USERNAME --permission add_sale --permission catalogue.change_product --permission
# catalogue.change_category` on the salesrank side).
SALESRANK_URL = os.environ.get("SALESRANK_URL", "http://127.0.0.1:8000")
SALESRANK_TOKEN = os.environ.get("SALESRANK_TOKEN", "")
SALESRANK_PRODUCT_ID = os.environ.get("SALESRANK_PRODUCT_ID", "id")

# salesrank: Celery sends the outbox as soon as an order commits (the on-commit task), and the
# beat sends what is left every 10 seconds (after salesrank was down, say).
CELERY_BROKER_URL = os.environ.get("SHOP_CELERY_BROKER_URL", "redis://127.0.0.1:6379/3")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SHOP_CELERY_QUEUE", "oscar-shop")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "salesrank-send": {
        "task": "salesrank_oscar.tasks.send_outbox",
        "schedule": 10,  # seconds
        "options": {"expires": 10},  # seconds: a missed run is the next one's work
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("SHOP_LOG_LEVEL", "INFO")},
}
