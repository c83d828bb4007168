"""``[web]`` auth: none, token (Bearer, ?token= -> cookie), header (proxy user, allow-list)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpuwatch.config import Settings
from gpuwatch.config.web import WebConfig
from gpuwatch.web.routes import build_web_router


@pytest.fixture
def client_for(engine):  # type: ignore[no-untyped-def]
    clients = []

    def make(**web) -> TestClient:  # type: ignore[no-untyped-def]
        app = FastAPI()
        app.include_router(build_web_router(Settings(web=WebConfig(**web)), engine))
        client = TestClient(app)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


def test_none_lets_everyone_in(client_for):
    assert client_for().get("/").status_code == 200


def test_token_bearer_query_and_cookie(client_for, tmp_path):
    token_file = tmp_path / "web.token"
    token_file.write_text("s3cret\n")
    client = client_for(auth="token", token_file=token_file)
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    first = client.get("/jobs?token=s3cret&x=1", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/jobs?x=1"
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "s3cret" not in cookie
    assert client.get("/jobs").status_code == 200  # the cookie now
    client.cookies.clear()
    assert client.get("/jobs?token=nope", follow_redirects=False).status_code == 401


def test_token_mode_needs_a_token():
    with pytest.raises(ValueError, match=r"web\.token"):
        WebConfig(auth="token")


def test_header_trusts_the_proxy_for_allowed_users(client_for):
    client = client_for(auth="header", allowed_users=["alice"])
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"X-Remote-User": "mallory"}).status_code == 403
    assert client.get("/", headers={"X-Remote-User": "alice"}).status_code == 200
    anyone = client_for(auth="header", user_header="X-Forwarded-User", allowed_users=["*"])
    assert anyone.get("/", headers={"X-Forwarded-User": "bob"}).status_code == 200
    assert anyone.get("/", headers={"X-Remote-User": "bob"}).status_code == 401


def test_disabled_serves_nothing(client_for):
    assert client_for(enabled=False).get("/").status_code == 404
