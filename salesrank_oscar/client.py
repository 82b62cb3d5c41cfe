"""salesrank over HTTP: batches posted with retries and backoff, boards read within a deadline."""

import threading
import time

import requests

from .conf import setting

# Answers that say "not now": the same request may succeed later.
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
# The longest wait a 429's Retry-After may impose between two tries within one send.
RETRY_AFTER_MOST = 30  # seconds


class Unreachable(Exception):
    """salesrank did not take a batch: no answer in time, or an answer that says to try later."""


class Refused(Exception):
    """salesrank refused a request as a whole (400, 401, 403, 404, 413) or answered something that is
    not its reply: the shop's settings (the URL, the token's permissions) need fixing, not the rows."""


_local = threading.local()


def _session() -> requests.Session:
    """One session (its kept-alive connections) per thread: requests' sessions are not thread-safe."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def _url(path: str) -> str:
    return setting("SALESRANK_URL").rstrip("/") + path


def _headers() -> dict:
    token = setting("SALESRANK_TOKEN")
    return {"Authorization": f"Token {token}"} if token else {}


def post(path: str, body: dict) -> dict:
    """salesrank's JSON reply to POST `path`, tried SALESRANK_SEND_ATTEMPTS times with a doubling
    wait between tries (a 429's Retry-After where it says more)."""
    attempts = max(1, setting("SALESRANK_SEND_ATTEMPTS"))
    wait = setting("SALESRANK_SEND_BACKOFF")
    failure = ""
    for attempt in range(1, attempts + 1):
        pause = wait
        try:
            response = _session().post(
                _url(path), json=body, headers=_headers(), timeout=setting("SALESRANK_SEND_TIMEOUT")
            )
        except requests.RequestException as error:
            failure = f"{type(error).__name__}: {error}"
        else:
            if response.status_code == 200:
                try:
                    return response.json()
                except ValueError:
                    raise Refused(f"POST {path}: a reply that is not JSON") from None
            failure = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code not in RETRY_STATUSES:
                raise Refused(f"POST {path}: {failure}")
            pause = max(wait, _retry_after(response))
        if attempt < attempts:
            time.sleep(pause)
            wait *= 2
    raise Unreachable(f"POST {path}: {failure} ({attempts} tries)")


def _retry_after(response: requests.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", 0)), RETRY_AFTER_MOST)
    except ValueError:
        return 0.0


def read(path: str, params: dict) -> dict | None:
    """salesrank's reply to GET `path` within SALESRANK_READ_TIMEOUT: the JSON of a 200, {} for a 404
    (a product or a category it does not know), None when it did not answer so (down, slow,
    throttled, failing). Never raises."""
    try:
        response = _session().get(
            _url(path), params=params, headers=_headers(), timeout=setting("SALESRANK_READ_TIMEOUT")
        )
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            return None
        reply = response.json()
    except (requests.RequestException, ValueError):
        return None
    return reply if isinstance(reply, dict) else None
