"""`/dashboard/data` per role: a tenant key gets its own tenant's cards, history and templates
(beside the server-wide numbers everyone gets from `/server_info`), an admin key the whole server's,
no key a 401; a keyless server shows everything."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

KEYS = {"dash-key-a": "dash-a", "dash-key-b": "dash-b"}  # tenants no other test of the shared engine uses
ADMIN = "dash-admin"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed(make_client) -> TestClient:
    client = make_client(api_keys=KEYS, admin_api_keys=[ADMIN])
    tagged = {"prompt_template": "dash-template", "prompt_source": "app/dash.py:7"}
    for key, metadata in (("dash-key-a", tagged), ("dash-key-a", tagged), ("dash-key-b", None)):
        body = {"model": "tiny", "prompt": f"dashboard view check for {key}", "max_tokens": 2, "temperature": 0}
        r = client.post("/v1/completions", headers=_auth(key), json={**body, "metadata": metadata})
        assert r.status_code == 200, r.text
    return client


def _data(client: TestClient, key: str | None) -> dict:
    r = client.get("/dashboard/data", headers=_auth(key) if key else {})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_tenant_sees_its_own_tenant_only(keyed: TestClient) -> None:
    a, b = _data(keyed, "dash-key-a"), _data(keyed, "dash-key-b")
    assert a["scope"] == {"role": "tenant", "tenant": "dash-a"}
    assert [(r["template"], r["requests"]) for r in a["templates"]] == [("dash-template", 2)]
    assert [(r["template"], r["requests"]) for r in b["templates"]] == [("(untagged)", 1)]
    assert sum(p["requests"] for p in a["points"]) == 2 and sum(p["requests"] for p in b["points"]) == 1
    row = a["templates"][0]
    assert a["cards"]["cache_hit_rate"] == row["cached_tokens"] / row["prompt_tokens"]  # its own rows' rate
    assert a["points"][-1]["token_usage"] == b["points"][-1]["token_usage"]  # the server's level, for everyone
    for view in (a, b):  # what /server_info keeps for admins stays out of a tenant's view
        assert set(view["cards"]) == {
            "cache_hit_rate",
            "token_usage",
            "num_running_reqs",
            "num_waiting_reqs",
            "max_total_num_tokens",
            "page_size",
        }


def test_the_admin_sees_everything(keyed: TestClient) -> None:
    view = _data(keyed, ADMIN)
    assert view["scope"] == {"role": "admin", "tenant": None}
    requests = {r["template"]: r["requests"] for r in view["templates"]}
    assert requests["dash-template"] >= 2 and requests["(untagged)"] >= 1
    assert sum(p["requests"] for p in view["points"]) == 3
    assert view["cards"]["kv_cache_dtype"] == "float32" and "prefix_cache_hits_by_tier" in view["cards"]
    info = keyed.get("/server_info", headers=_auth(ADMIN)).json()
    assert view["cards"]["max_total_num_tokens"] == info["max_total_num_tokens"]


def test_no_key_is_a_401_and_a_keyless_server_shows_everything(keyed: TestClient, client: TestClient) -> None:
    r = keyed.get("/dashboard/data")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert keyed.get("/dashboard").status_code == 200  # the page itself holds no data
    assert _data(client, None)["scope"] == {"role": "admin", "tenant": None}


def test_the_page_reads_only_the_scoped_view_and_says_why_when_empty(client: TestClient) -> None:
    page = client.get("/dashboard").text
    assert 'getJSON("/dashboard/data")' in page
    assert 'getJSON("/server_info")' not in page and 'getJSON("/v1/prompt_stats")' not in page
    for empty_state in ("no tagged requests yet for this tenant", "statistics need an API key", "no requests yet"):
        assert empty_state in page
