"""Settings for the test suite: each run (and each xdist worker) gets its own
database and its own Redis key prefix, so runs never see each other's data."""

import os
import uuid

os.environ.setdefault("SECRET_KEY", "test-only-key")

from .settings import *  # noqa: E402, F403
from .settings import CACHES, DATABASES, RANKINGS, Queue, tick_queue_names  # noqa: E402

RUN_ID = os.environ.setdefault("SALESRANK_TEST_RUN", uuid.uuid4().hex[:10])
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; tests only
# The test client builds the middleware anew for each client (hundreds a run), and WhiteNoise's
# would look up every static file each time (some 170, each with its compressed variants: about
# 13 ms of CPU); in autorefresh mode it finds a file when it is asked for, as a web process that
# builds it once need not.
WHITENOISE_AUTOREFRESH = True
DATABASES["default"]["TEST"] = {"NAME": f"test_salesrank_{RUN_ID}"}
# No wake on commit in this process: nothing consumes its tasks (tests of the wake turn it on).
RANKINGS = {**RANKINGS, "KEY_PREFIX": f"test-{RUN_ID}-{WORKER}", "TICK_WAKE": False}
CACHES["default"]["KEY_PREFIX"] = RANKINGS["KEY_PREFIX"] + ":cache"
CELERY_TASK_DEFAULT_QUEUE = RANKINGS["KEY_PREFIX"] + ":tasks"
RANKINGS["TICK_QUEUES"] = tick_queue_names(RANKINGS["KEY_PREFIX"], len(RANKINGS["TICK_QUEUES"]))
CELERY_TASK_QUEUES = [Queue(name) for name in (CELERY_TASK_DEFAULT_QUEUE, *RANKINGS["TICK_QUEUES"])]
