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


def _directives(reply) -> dict[str, str]:
    """A response's policy, directive by directive (django-csp writes them in no set order)."""
    policy = reply.get("Content-Security-Policy", "")
    return dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())


def test_every_response_carries_a_policy_that_allows_no_other_origin(client, admin_client):
    Shop().tick()
    urls = ["/", "/c/all/", "/p/nobody/", "/c/all/?page=x", "/v1/docs", "/v1/categories", "/v1/status"]
    replies = [client.get(url) for url in urls] + [client.get("/admin/login/"), admin_client.get("/admin/")]

    for reply in replies:
        policy = reply.get("Content-Security-Policy", "")
        directives = _directives(reply)
        assert directives.get("default-src") == "'self'", (reply.request["PATH_INFO"], policy)
        assert "http" not in policy and "*" not in policy
        assert "'unsafe-inline'" not in directives.get("script-src", "")
        assert directives.get("frame-ancestors") == "'none'"


def test_the_policy_is_built_once_not_for_every_response_and_a_view_s_own_policy_still_holds(
    client, settings, monkeypatch
):
    import csp.middleware
    from csp.decorators import csp_update
    from django.http import HttpResponse
    from django.test import RequestFactory

    from salesrank_site import security_policy

    built = []

    def counted(build):
        def build_counted(*args, **kwargs):
            built.append(kwargs.get("report_only", False))
            return build(*args, **kwargs)

        return build_counted

    # given the policy's builder counted wherever the middleware may call it
    monkeypatch.setattr(csp.middleware, "build_policy", counted(csp.middleware.build_policy))
    monkeypatch.setattr(security_policy, "build_policy", counted(security_policy.build_policy))
    settings.CONTENT_SECURITY_POLICY = {
        "DIRECTIVES": {"default-src": ["'self'"], "img-src": ["'self'", "data:"]}
    }
    # when twenty responses are made
    replies = [client.get("/v1/categories") for _ in range(20)]
    # then each carries the settings' policy, built once (and the report-only one, none, once)
    assert [_directives(reply) for reply in replies] == [
        {"default-src": "'self'", "img-src": "'self' data:"}
    ] * 20
    assert all("Content-Security-Policy-Report-Only" not in reply for reply in replies)
    assert sorted(built) == [False, True]
    # and a change of the setting is a policy built anew
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": ["'none'"]}}
    assert _directives(client.get("/v1/categories")) == {"default-src": "'none'"}

    # and a view that widens its own policy gets it
    @csp_update({"img-src": "https://images.example"})
    def view(request):
        return HttpResponse("")

    middleware = security_policy.CSPMiddleware(view)
    reply = middleware(RequestFactory().get("/"))
    assert _directives(reply) == {"default-src": "'none'", "img-src": "https://images.example"}
