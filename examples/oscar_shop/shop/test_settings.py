"""The example shop under salesrank_oscar's tests: a database and a Celery queue of each run's own."""

import os
import uuid

from .settings import *  # noqa: F403
from .settings import DATABASES

RUN_ID = os.environ.setdefault("SALESRANK_OSCAR_TEST_RUN", uuid.uuid4().hex[:10])

DATABASES["default"]["NAME"] = f"oscar_shop_{RUN_ID}"
DATABASES["default"]["TEST"] = {"NAME": f"test_oscar_shop_{RUN_ID}"}
CELERY_TASK_DEFAULT_QUEUE = f"oscar-shop-{RUN_ID}"
# Tests send the outbox themselves; the test of the task turns this on, with a worker running.
SALESRANK_SEND_ON_COMMIT = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; tests only
