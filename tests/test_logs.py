"""Logs: plain lines by default; with LOG_FORMAT=json one JSON object a line, a request's line with
its method, path, status, duration and id (the id also in the reply's X-Request-ID)."""

import json
import logging
import os
import subprocess
import sys
import uuid

import pytest
from django.test import Client

from .processes import ROOT

pytestmark = pytest.mark.django_db

_LOG_A_WARNING = (
    "import django, logging; django.setup();"
    " logging.getLogger('rankings.example').warning('%s boards behind', 3)"
)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    environment = {
        **{k: v for k, v in os.environ.items() if k != "LOG_FORMAT"},
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "SECRET_KEY": "test-only-key",
        "READ_DOT_ENV": "0",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.processes
def test_with_log_format_json_each_line_is_one_json_object():
    done = _run(_LOG_A_WARNING, LOG_FORMAT="json")

    (line,) = [line for line in done.stderr.splitlines() if "boards behind" in line]
    record = json.loads(line)
    assert (record["level"], record["logger"], record["message"]) == (
        "WARNING",
        "rankings.example",
        "3 boards behind",
    )
    assert record["time"].endswith("+00:00")
    assert record["request_id"] is None  # outside a request or a task


@pytest.mark.processes
def test_by_default_a_line_is_the_plain_message():
    done = _run(_LOG_A_WARNING)

    assert "3 boards behind" in done.stderr.splitlines()


@pytest.mark.processes
def test_an_unknown_log_format_stops_the_start():
    done = _run("import django; django.setup()", LOG_FORMAT="xml")

    assert done.returncode != 0
    assert "LOG_FORMAT must be one of text, json, not 'xml'" in done.stderr


def test_a_request_is_logged_once_with_its_method_path_status_duration_and_id(caplog):
    request_id = str(uuid.uuid4())
    with caplog.at_level(logging.INFO, logger="salesrank.requests"):
        reply = Client().get("/v1/categories", HTTP_X_REQUEST_ID=request_id)

    assert reply["X-Request-ID"] == request_id
    (record,) = [r for r in caplog.records if r.name == "salesrank.requests"]
    assert (record.method, record.path, record.status) == ("GET", "/v1/categories", 200)
    assert record.duration_ms > 0


def test_a_request_without_an_id_or_with_one_that_is_not_a_uuid_gets_a_new_one():
    given = Client().get("/v1/categories", HTTP_X_REQUEST_ID="x" * 5000)["X-Request-ID"]
    made = Client().get("/v1/categories")["X-Request-ID"]

    assert given != "x" * 5000
    assert uuid.UUID(given) and uuid.UUID(made) and given != made


def test_a_long_path_is_logged_cut_short(caplog):
    with caplog.at_level(logging.INFO, logger="salesrank.requests"):
        Client().get("/v1/" + "x" * 10_000)

    (record,) = [r for r in caplog.records if r.name == "salesrank.requests"]
    assert record.status == 404
    assert record.path == ("/v1/" + "x" * 10_000)[:200]
