"""OAuth 2.1 at /mcp through the official Python SDK (`mcp` 2.3.0): its OAuthClientProvider
discovers the server from the 401 challenge, registers itself (RFC 7591), sends the owner's
browser to the consent page (played here by an httpx client carrying a dashboard session cookie,
signed in through the outbox's link), exchanges the code with PKCE, and then calls the tools in
both protocol generations. The wire shapes behind it are checked over plain httpx."""

from __future__ import annotations

import contextlib
import re
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2  # the HTTP client the mcp SDK is built on
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

MODES = ["legacy", "2026-07-28"]
TOOLS = {"svc_read", "svc_write", "svc_ai"}
# Never contacted: the redirect handler reads the consent's 303 itself, as a loopback listener would.
REDIRECT = "http://127.0.0.1:9/callback"
COOKIE = "toolgate_session"
APP = "SDK OAuth test"


def run(fn, *args):
    return anyio.run(fn, *args)


class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Inputs(HTMLParser):
    """The `<input>` fields (name, value) of the form with a given id."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.found = False
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form" and attributes.get("id") == self.form_id:
            self.inside = self.found = True
        elif tag == "input" and self.inside and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False


def form_fields(page: str, form_id: str) -> dict[str, str]:
    parser = Inputs(form_id)
    parser.feed(page)
    assert parser.found, f"no form#{form_id} in:\n{page[:3000]}"
    return parser.fields


def outbox_link(data_dir: Path, email: str, seconds: float = 10) -> str:
    """The sign-in link of the (one) mail to EMAIL in the server's outbox."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path in sorted((data_dir / "outbox").glob("*.eml")):
            text = path.read_text(errors="replace")
            if not re.search(rf"^To: .*{re.escape(email)}", text, re.M | re.I):
                continue
            links = re.findall(r"^\s*(https?://\S+/dashboard/sign-in/confirm\?token=\S+)\s*$", text, re.M)
            assert len(links) == 1, f"expected one sign-in link in {path}:\n{text}"
            return links[0]
        time.sleep(0.02)
    raise AssertionError(f"no sign-in mail to {email} arrived in {data_dir / 'outbox'}")


class Owner:
    """An account signed in to the dashboard: its session cookie, key, and the browser that consents for it."""

    def __init__(self, server) -> None:
        self.base = server.base_url
        self.email = f"oauth-{uuid.uuid4().hex[:12]}@example.test"
        asked = httpx.post(f"{self.base}/magic-link", json={"email": self.email}, timeout=30)
        assert asked.status_code == 202, (asked.status_code, asked.text)
        link = outbox_link(server.data_dir, self.email)
        assert link.startswith(f"{self.base}/dashboard/sign-in/confirm?token="), link
        token = parse_qs(urlsplit(link).query)["token"][0]
        confirmed = httpx.post(
            f"{self.base}/dashboard/sign-in/confirm",
            data={"token": token},
            headers={"Origin": self.base},
            follow_redirects=False,
            timeout=30,
        )
        assert confirmed.status_code == 303, (confirmed.status_code, confirmed.text)
        match = re.search(rf"{COOKIE}=([0-9a-f]{{64}})", confirmed.headers.get("set-cookie", ""))
        assert match, f"no session cookie: {confirmed.headers}"
        self.cookie = f"{COOKIE}={match.group(1)}"
        overview = self.page("/dashboard")
        found = re.search(r'id="personal-url-full"[^>]*>\s*([^<\s]+)', overview)
        assert found, "the overview shows no personal URL"
        self.key = found.group(1).rsplit("/u/", 1)[1]
        self.consents: list[str] = []
        self.pending: AuthorizationCodeResult | None = None

    def page(self, path: str) -> str:
        reply = httpx.get(f"{self.base}{path}", headers={"Cookie": self.cookie}, follow_redirects=False, timeout=30)
        assert reply.status_code == 200, (path, reply.status_code, reply.headers.get("location"))
        return reply.text

    def free_remaining(self) -> int:
        status = httpx.get(f"{self.base}/billing/status", headers={"X-Api-Key": self.key}, timeout=30)
        assert status.status_code == 200, status.text
        return status.json()["free_remaining_this_month"]

    async def redirect_handler(self, authorization_url: str) -> None:
        """The browser: open the authorization URL signed in, allow, and catch the redirect back."""
        self.consents.append(authorization_url)
        assert authorization_url.startswith(f"{self.base}/dashboard/oauth/authorize?"), authorization_url
        asked = {name: values[0] for name, values in parse_qs(urlsplit(authorization_url).query).items()}
        assert asked["code_challenge_method"] == "S256" and asked["resource"] == f"{self.base}/mcp", asked
        async with httpx.AsyncClient(follow_redirects=False, timeout=30, headers={"Cookie": self.cookie}) as browser:
            page = await browser.get(authorization_url)
            assert page.status_code == 200, (page.status_code, page.headers.get("location"), page.text[:2000])
            fields = form_fields(page.text, "authorize")
            assert fields.get("csrf"), fields
            assert fields["client_id"] == asked["client_id"] and fields["state"] == asked["state"], fields
            reply = await browser.post(
                f"{self.base}/dashboard/oauth/authorize",
                data={**fields, "decision": "allow"},
                headers={"Origin": self.base},
            )
        assert reply.status_code == 303, (reply.status_code, reply.text[:2000])
        location = reply.headers["location"]
        assert location.startswith(f"{REDIRECT}?"), location
        back = {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}
        assert "error" not in back, back
        self.pending = AuthorizationCodeResult(code=back["code"], state=back.get("state"), iss=back.get("iss"))

    async def callback_handler(self) -> AuthorizationCodeResult:
        result, self.pending = self.pending, None
        assert result is not None, "the callback ran without a redirect"
        return result

    def provider(self, storage: MemoryStorage | None = None) -> OAuthClientProvider:
        return OAuthClientProvider(
            server_url=f"{self.base}/mcp",
            client_metadata=OAuthClientMetadata(
                redirect_uris=[REDIRECT],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
                client_name=APP,
            ),
            storage=storage if storage is not None else MemoryStorage(),
            redirect_handler=self.redirect_handler,
            callback_handler=self.callback_handler,
        )


@contextlib.asynccontextmanager
async def connect(server, provider: OAuthClientProvider, mode: str) -> AsyncIterator[Client]:
    # the SDK takes the provider as the httpx2 client's auth
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(
            streamable_http_client(f"{server.base_url}/mcp", http_client=http), mode=mode, read_timeout_seconds=60
        ) as client:
            yield client


async def billing(client: Client) -> dict:
    result = await client.call_tool("svc_read", {"billing": True})
    assert not result.is_error, f"svc_read billing failed: {result.content}"
    record = (result.structured_content or {}).get("billing")
    assert isinstance(record, dict), result
    return record


@pytest.mark.parametrize("mode", MODES)
def test_sdk_signs_in_and_calls_the_tools(server, mode: str) -> None:
    owner = Owner(server)
    storage = MemoryStorage()
    provider = owner.provider(storage)

    async def scenario() -> None:
        with anyio.fail_after(120):
            async with connect(server, provider, mode) as client:
                tools = (await client.list_tools()).tools
                assert {tool.name for tool in tools} == TOOLS, [tool.name for tool in tools]
                record = await billing(client)
                assert record["free_remaining_this_month"] == 999, record

    run(scenario)
    assert len(owner.consents) == 1, owner.consents
    assert storage.client_info is not None and storage.client_info.client_id.startswith("tgc_"), storage.client_info
    assert storage.tokens is not None and storage.tokens.refresh_token, storage.tokens
    assert set((storage.tokens.scope or "").split()) == {"mcp", "offline_access"}, storage.tokens
    # metered to the signed-in account: its own key's status shows the call
    assert owner.free_remaining() == 999
    # the app is listed under Connected apps, by name
    apps = owner.page("/dashboard/apps")
    assert f'data-client="{storage.client_info.client_id}"' in apps and APP in apps, apps[:3000]

    # a new provider over the same storage (a restarted client) needs no new consent
    async def again() -> None:
        with anyio.fail_after(120):
            async with connect(server, owner.provider(storage), mode) as client:
                assert (await billing(client))["free_remaining_this_month"] == 998

    run(again)
    assert len(owner.consents) == 1, owner.consents
    assert owner.free_remaining() == 998


@pytest.mark.parametrize("mode", MODES)
def test_sdk_refreshes_and_reauthorizes(server, mode: str) -> None:
    owner = Owner(server)
    storage = MemoryStorage()
    provider = owner.provider(storage)

    async def call() -> None:
        with anyio.fail_after(120):
            async with connect(server, provider, mode) as client:
                await billing(client)

    run(call)
    first = storage.tokens
    assert first is not None and first.refresh_token

    # the access token expired: the SDK refreshes it (rotation) without asking the owner again
    provider.context.token_expiry_time = time.time() - 1
    run(call)
    second = storage.tokens
    assert second is not None
    assert second.access_token != first.access_token and second.refresh_token != first.refresh_token
    assert len(owner.consents) == 1, owner.consents

    # the old refresh token is replayed (say, stolen): the whole family is revoked
    replay = httpx.post(
        f"{server.base_url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": first.refresh_token, "client_id": storage.client_info.client_id},
        timeout=30,
    )
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant", replay.text
    refused = httpx.post(
        f"{server.base_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {second.access_token}", "Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    assert refused.status_code == 401, refused.text
    # the SDK meets the 401 and authorizes again through the owner's browser
    run(call)
    assert len(owner.consents) == 2, owner.consents
    assert storage.tokens.access_token not in {first.access_token, second.access_token}
    assert owner.free_remaining() == 1000 - 3


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}


def check_challenge(server, reply: httpx.Response, error: str | None) -> None:
    assert reply.status_code == 401, (reply.status_code, reply.text)
    challenge = reply.headers.get("www-authenticate", "")
    assert challenge.startswith("Bearer "), challenge
    assert f'resource_metadata="{server.base_url}/.well-known/oauth-protected-resource/mcp"' in challenge, challenge
    assert 'scope="mcp"' in challenge, challenge
    if error is None:
        assert "error=" not in challenge, challenge
    else:
        assert f'error="{error}"' in challenge, challenge
    body = reply.json()
    assert body["error"]["code"] == -32001 and body["error"]["message"], body


def test_mcp_without_a_token_is_challenged(server) -> None:
    check_challenge(server, httpx.post(f"{server.base_url}/mcp", json=LIST, headers=MCP_HEADERS, timeout=30), None)


@pytest.mark.parametrize("token", ["garbage", secrets.token_hex(32)], ids=["garbage", "unknown"])
def test_mcp_with_a_bad_token_is_challenged(server, token: str) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    reply = httpx.post(f"{server.base_url}/mcp", json=LIST, headers=headers, timeout=30)
    check_challenge(server, reply, "invalid_token")


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
def test_protected_resource_metadata(server, path: str) -> None:
    reply = httpx.get(f"{server.base_url}{path}", timeout=30)
    assert reply.status_code == 200, reply.text
    prm = reply.json()
    assert prm["resource"] == f"{server.base_url}/mcp", prm
    assert prm["authorization_servers"] == [server.base_url], prm
    assert prm["scopes_supported"] == ["mcp"], prm


@pytest.mark.parametrize("path", ["/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"])
def test_authorization_server_metadata(server, path: str) -> None:
    reply = httpx.get(f"{server.base_url}{path}", timeout=30)
    assert reply.status_code == 200, reply.text
    asm = reply.json()
    assert asm["issuer"] == server.base_url, asm
    assert asm["code_challenge_methods_supported"] == ["S256"], asm
    assert asm["authorization_response_iss_parameter_supported"] is True, asm
    assert asm["authorization_endpoint"] == f"{server.base_url}/dashboard/oauth/authorize", asm
    assert asm["token_endpoint"] == f"{server.base_url}/oauth/token", asm
    assert asm["registration_endpoint"] == f"{server.base_url}/oauth/register", asm
