"""The API's docs work without internet, and every response carries a policy that allows no other origin."""

import re

import pytest

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def _assets(html: str) -> list[str]:
    return re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]+)"', html)


def test_the_docs_page_loads_only_assets_of_this_server_and_each_is_served(client):
    # given the docs page
    page = client.get("/v1/docs")
    assert page.status_code == 200
    assets = _assets(page.content.decode())
    # then it names its script, styles and bundles, every one on this origin
    assert any("swagger-ui-bundle" in a for a in assets) and any(".css" in a for a in assets)
    assert all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    # and this server serves each of them
    for asset in assets:
        reply = client.get(asset)
        assert reply.status_code == 200, asset
        if hasattr(reply, "streaming_content"):
            b"".join(reply.streaming_content)
    assert "<script>" not in page.content.decode()  # no inline script: the policy would refuse it


def test_every_response_carries_a_policy_that_allows_no_other_origin(client, admin_client):
    Shop().tick()
    urls = ["/", "/c/all/", "/p/nobody/", "/c/all/?page=x", "/v1/docs", "/v1/categories", "/v1/status"]
    replies = [client.get(url) for url in urls] + [client.get("/admin/login/"), admin_client.get("/admin/")]

    for reply in replies:
        policy = reply.get("Content-Security-Policy", "")
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
        assert directives.get("default-src") == "'self'", (reply.request["PATH_INFO"], policy)
        assert "http" not in policy and "*" not in policy
        assert "'unsafe-inline'" not in directives.get("script-src", "")
        assert directives.get("frame-ancestors") == "'none'"
