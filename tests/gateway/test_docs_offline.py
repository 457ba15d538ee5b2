"""`/docs` and `/redoc` work without the internet: every asset their pages load is a local URL the
gateway itself serves."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

URL_IN_PAGE = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url\s*:\s*['"]([^'"]+)['"]""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_page_loads_only_local_assets(client: TestClient, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    urls = [a or b for a, b in URL_IN_PAGE.findall(r.text)]
    assert any(u.endswith(".js") for u in urls) and "/openapi.json" in urls
    remote = [u for u in urls if "://" in u or u.startswith("//")]
    assert remote == [], f"{page} loads from the network: {remote}"
    assert "cdn" not in r.text.lower() and "fonts.googleapis" not in r.text
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100, url


def test_swagger_ui_bundled_reads_openapi_3_1(client: TestClient) -> None:
    """FastAPI writes OpenAPI 3.1, which Swagger UI renders from version 5: the bundle must be 5 or later."""
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    js = client.get("/docs/static/swagger-ui-bundle.js").text
    versions = {int(v) for v in re.findall(r'"(\d+)\.\d+\.\d+"', js[:2_000_000]) if int(v) < 100}
    assert 5 in versions
