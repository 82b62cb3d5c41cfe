"""The API's docs work without internet, and every response carries a policy that allows no other origin."""

import re

import pytest
from csp.decorators import csp, csp_exempt, csp_replace, csp_update
from django.http import HttpResponse

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


def _directives(policy: str) -> dict[str, str]:
    """A policy, directive by directive (django-csp writes them in no set order)."""
    return {
        name: value for name, _, value in (d.strip().partition(" ") for d in policy.split(";") if d.strip())
    }


def test_every_response_carries_a_policy_that_allows_no_other_origin(client, admin_client):
    Shop().tick()
    urls = ["/", "/c/all/", "/p/nobody/", "/c/all/?page=x", "/v1/docs", "/v1/categories", "/v1/status"]
    replies = [client.get(url) for url in urls] + [client.get("/admin/login/"), admin_client.get("/admin/")]

    for reply in replies:
        policy = reply.get("Content-Security-Policy", "")
        directives = _directives(policy)
        assert directives.get("default-src") == "'self'", (reply.request["PATH_INFO"], policy)
        assert "http" not in policy and "*" not in policy
        assert "'unsafe-inline'" not in directives.get("script-src", "")
        assert directives.get("frame-ancestors") == "'none'"


def test_the_policy_is_built_once_not_for_every_response(client, settings, monkeypatch):
    import csp.middleware

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
    assert [_directives(reply["Content-Security-Policy"]) for reply in replies] == [
        {"default-src": "'self'", "img-src": "'self' data:"}
    ] * 20
    assert all("Content-Security-Policy-Report-Only" not in reply for reply in replies)
    assert sorted(built) == [False, True]
    # and a change of the setting is a policy built anew
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": ["'none'"]}}
    assert _directives(client.get("/v1/categories")["Content-Security-Policy"]) == {"default-src": "'none'"}


class _Sandboxed(HttpResponse):
    """A response whose class, not the view, asks for a stricter policy."""

    _csp_config = {"default-src": ["'none'"], "sandbox": [""]}


def _nonce_used(request):
    return HttpResponse(f"<script nonce='{request.csp_nonce}'></script>")


# Views that ask for another policy than the settings', each as django-csp's decorators let them.
_VIEWS = {
    "plain": lambda request: HttpResponse(""),
    "exempt": csp_exempt()(lambda request: HttpResponse("")),
    "exempt, report-only": csp_exempt(REPORT_ONLY=True)(lambda request: HttpResponse("")),
    "update": csp_update({"img-src": "https://images.example"})(lambda request: HttpResponse("")),
    "update, report-only": csp_update({"img-src": "https://images.example"}, REPORT_ONLY=True)(
        lambda request: HttpResponse("")
    ),
    "replace": csp_replace({"img-src": "https://images.example"})(lambda request: HttpResponse("")),
    "own policy": csp({"default-src": ["'none'"]})(lambda request: HttpResponse("")),
    "own policy, report-only": csp({"default-src": ["'none'"]}, REPORT_ONLY=True)(
        lambda request: HttpResponse("")
    ),
    "the response's class": lambda request: _Sandboxed(""),
    "a nonce": _nonce_used,
}


@pytest.mark.parametrize("view", list(_VIEWS))
def test_every_response_gets_the_policy_django_csp_would_give_it(view, settings):
    from csp.constants import NONCE
    from csp.exceptions import CSPNonceError
    from csp.middleware import CSPMiddleware as Django_CSP
    from django.test import RequestFactory

    from salesrank_site.security_policy import CSPMiddleware

    settings.CONTENT_SECURITY_POLICY = {
        "DIRECTIVES": {"default-src": ["'self'"], "img-src": ["'self'"], "script-src": ["'self'", NONCE]}
    }
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = {
        "DIRECTIVES": {"default-src": ["'self'"], "script-src": ["'self'"]}
    }
    replies = {}
    for middleware in (CSPMiddleware, Django_CSP):
        request = RequestFactory().get("/")
        reply = middleware(_VIEWS[view])(request)
        nonce = re.search(r"nonce='([^']+)'", reply.content.decode())
        if nonce is None:  # a nonce asked for once the header is written is an error, not a nonce
            with pytest.raises(CSPNonceError):
                str(request.csp_nonce)
        else:  # the page's nonce is the policy's (each request has its own)
            assert f"'nonce-{nonce.group(1)}'" in reply["Content-Security-Policy"]
        policies = [
            reply.get(header, "")
            for header in ("Content-Security-Policy", "Content-Security-Policy-Report-Only")
        ]
        replies[middleware] = [_directives(p.replace(nonce.group(1), "…") if nonce else p) for p in policies]
    assert replies[CSPMiddleware] == replies[Django_CSP]
