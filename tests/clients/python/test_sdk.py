"""toolgate as seen through the official Python MCP SDK (`mcp` 2.3.0), both protocol generations,
every key carrier."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import httpx2  # the HTTP client the mcp SDK is built on
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

MODES = ["legacy", "2026-07-28"]
CARRIERS = ["personal_url", "bearer", "x_api_key", "query"]
TOOLS = {"svc_read", "svc_write", "svc_ai"}
MONEY = re.compile(r"^\d+\.\d\d$")
BILLING_FIELDS = {
    "tier": str,
    "free_remaining_this_month": int,
    "free_monthly_limit": int,
    "wallet_balance_usd": str,
    "paid_calls_available": int,
    "paid_call_cost_usd": str,
    "min_topup_usd": str,
    "max_topup_usd": str,
}


def run(fn, *args):
    return anyio.run(fn, *args)


def endpoint(base_url: str, personal_url: str, carrier: str, key: str) -> tuple[str, dict[str, str]]:
    """The URL and headers that carry KEY by CARRIER."""
    if carrier == "personal_url":
        return personal_url, {}
    if carrier == "bearer":
        return f"{base_url}/", {"Authorization": f"Bearer {key}"}
    if carrier == "x_api_key":
        return f"{base_url}/", {"X-Api-Key": key}
    if carrier == "query":
        return f"{base_url}/?key={key}", {}
    raise ValueError(carrier)


@contextlib.asynccontextmanager
async def connect(url: str, headers: dict[str, str], mode: str) -> AsyncIterator[Client]:
    # the SDK takes extra headers through an httpx2 client of our own
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60) as client:
            yield client


def find_mcp_error(exc: BaseException) -> MCPError | None:
    """The MCPError inside EXC (which may be an exception group or carry it as a cause)."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := find_mcp_error(inner)) is not None:
                return found
    if exc.__cause__ is not None:
        return find_mcp_error(exc.__cause__)
    return None


async def expect_mcp_error(code: int, url: str, headers: dict[str, str], mode: str, action) -> MCPError:
    try:
        with anyio.fail_after(60):
            async with connect(url, headers, mode) as client:
                await action(client)
    except BaseException as exc:  # noqa: BLE001 - we look inside whatever the SDK raised
        err = find_mcp_error(exc)
        assert err is not None, f"expected an MCP error {code}, got {exc!r}"
        assert err.code == code, f"expected MCP error {code}, got {err.code}: {err.message}"
        return err
    raise AssertionError(f"expected an MCP error {code}, but the call succeeded")


def check_billing_record(record: Any) -> dict:
    assert isinstance(record, dict), f"billing record is not an object: {record!r}"
    for field, kind in BILLING_FIELDS.items():
        assert field in record, f"billing record lacks {field!r}: {record}"
        value = record[field]
        assert isinstance(value, kind) and not isinstance(value, bool), f"{field} should be {kind.__name__}: {value!r}"
    assert record["tier"], record
    assert record["free_monthly_limit"] == 1000
    assert 0 <= record["free_remaining_this_month"] <= record["free_monthly_limit"]
    assert record["paid_calls_available"] >= 0
    assert MONEY.match(record["wallet_balance_usd"]), record["wallet_balance_usd"]
    assert record["paid_call_cost_usd"] == "0.008"
    assert record["min_topup_usd"] == "5.00"
    assert record["max_topup_usd"] == "500.00"
    wallet = Decimal(record["wallet_balance_usd"])
    assert record["paid_calls_available"] == int(wallet / Decimal("0.008")), record
    return record


async def billing_via_tool(client: Client) -> dict:
    result = await client.call_tool("svc_read", {"billing": True})
    assert not result.is_error, f"svc_read billing failed: {result.content}"
    assert isinstance(result.structured_content, dict), f"no structuredContent: {result}"
    assert "billing" in result.structured_content, result.structured_content
    record = check_billing_record(result.structured_content["billing"])
    texts = [item.text for item in result.content if getattr(item, "type", None) == "text"]
    assert texts, f"no text content item: {result.content}"
    parsed = None
    for text in texts:
        with contextlib.suppress(json.JSONDecodeError):
            parsed = json.loads(text)
            break
    assert parsed is not None, f"no text item holds JSON: {texts}"
    if isinstance(parsed, dict) and "billing" in parsed:
        parsed = parsed["billing"]
    assert parsed == record, f"text item {parsed} differs from structuredContent {record}"
    return record


def check_tools(tools) -> None:
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == TOOLS, f"tools/list names: {sorted(by_name)}"
    for tool in tools:
        title = tool.title or (tool.annotations and tool.annotations.title)
        assert title, f"{tool.name} has no title"
        assert tool.description, f"{tool.name} has no description"
        assert tool.input_schema.get("type") == "object", f"{tool.name} input schema: {tool.input_schema}"
        assert tool.annotations is not None, f"{tool.name} has no annotations"
    assert by_name["svc_read"].annotations.read_only_hint is True
    assert by_name["svc_write"].annotations.destructive_hint is True
    assert by_name["svc_ai"].annotations.read_only_hint is True
    assert by_name["svc_ai"].annotations.open_world_hint is True
    assert "billing" in by_name["svc_read"].input_schema.get("properties", {})
    write_fields = by_name["svc_write"].input_schema.get("properties", {})
    for field in ("code", "bash", "session_id", "timeout_s", "files"):
        assert field in write_fields, f"svc_write lacks {field}: {sorted(write_fields)}"
    assert by_name["svc_write"].input_schema.get("additionalProperties") is False
    assert "path" in by_name["svc_read"].input_schema.get("properties", {})


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("mode", MODES)
def test_tools_and_billing(server, account, mode: str, carrier: str) -> None:
    assert account["personal_url"] == f"{server.base_url}/u/{account['api_key']}"
    assert re.fullmatch(r"svck_[0-9a-f]{64}", account["api_key"]), account["api_key"]
    url, headers = endpoint(server.base_url, account["personal_url"], carrier, account["api_key"])

    async def scenario() -> None:
        async with connect(url, headers, mode) as client:
            check_tools((await client.list_tools()).tools)
            first = await billing_via_tool(client)
            # tools/list is free; the first metered call is counted before it runs
            assert first["free_remaining_this_month"] == first["free_monthly_limit"] - 1, first
            assert first["tier"] == "free", first
            assert first["wallet_balance_usd"] == "0.00" and first["paid_calls_available"] == 0, first
            await client.list_tools(cache_mode="bypass")
            second = await billing_via_tool(client)
            assert second["free_remaining_this_month"] == first["free_remaining_this_month"] - 1, (first, second)
            third = await billing_via_tool(client)
            assert third["free_remaining_this_month"] == second["free_remaining_this_month"] - 1, (second, third)

    run(scenario)
    # GET /billing/status is not a tool call: it shows the three calls and costs nothing
    status = httpx.get(f"{server.base_url}/billing/status", headers={"X-Api-Key": account["api_key"]}, timeout=30)
    assert status.status_code == 200, status.text
    assert check_billing_record(status.json())["free_remaining_this_month"] == 1000 - 3


@pytest.mark.parametrize("mode", ["auto"])
def test_default_client_mode_on_personal_url(server, account, mode: str) -> None:
    """`mcp.Client(url)` (mode auto: probe server/discover, fall back to initialize) just works."""

    async def scenario() -> None:
        async with Client(account["personal_url"], mode=mode, read_timeout_seconds=60) as client:
            check_tools((await client.list_tools()).tools)
            record = await billing_via_tool(client)
            assert record["free_remaining_this_month"] == 999

    run(scenario)


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("mode", MODES)
def test_bad_key_is_refused(server, mode: str, carrier: str) -> None:
    unknown = "svck_" + secrets.token_hex(32)
    url, headers = endpoint(server.base_url, f"{server.base_url}/u/{unknown}", carrier, unknown)

    async def scenario() -> None:
        await expect_mcp_error(-32001, url, headers, mode, lambda c: c.list_tools())

    run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_malformed_key_is_refused(server, mode: str) -> None:
    async def scenario() -> None:
        await expect_mcp_error(-32001, f"{server.base_url}/u/not-a-key", {}, mode, lambda c: c.list_tools())
        await expect_mcp_error(-32001, f"{server.base_url}/", {}, mode, lambda c: c.list_tools())  # no key at all

    run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_rotated_key_is_refused(server, account, mode: str) -> None:
    old_url = account["personal_url"]

    async def works(url: str) -> None:
        async with connect(url, {}, mode) as client:
            check_tools((await client.list_tools()).tools)

    run(works, old_url)
    rotated = server.cli("account", "rotate-key", "--email", account["email"])
    assert rotated["account_id"] == account["account_id"] and rotated["email"] == account["email"], rotated
    assert rotated["api_key"] != account["api_key"]
    assert rotated["personal_url"] == f"{server.base_url}/u/{rotated['api_key']}"

    async def scenario() -> None:
        await expect_mcp_error(-32001, old_url, {}, mode, lambda c: c.list_tools())
        url, headers = endpoint(server.base_url, old_url, "bearer", account["api_key"])
        await expect_mcp_error(-32001, url, headers, mode, lambda c: c.list_tools())

    run(scenario)
    run(works, rotated["personal_url"])


@pytest.mark.parametrize("mode", MODES)
def test_unknown_tool(server, account, mode: str) -> None:
    async def scenario() -> None:
        err = await expect_mcp_error(-32601, account["personal_url"], {}, mode, lambda c: c.call_tool("svc_nope", {}))
        assert err.message, "error without a message"
        # an unknown tool is free
        async with connect(account["personal_url"], {}, mode) as client:
            assert (await billing_via_tool(client))["free_remaining_this_month"] == 999

    run(scenario)


def test_wallet_credit_shows_in_billing(server, account) -> None:
    status = server.cli("wallet", "credit", "--email", account["email"], "--usd", "12.50")
    check_billing_record(status)
    assert status["wallet_balance_usd"] == "12.50" and status["paid_calls_available"] == 1562, status

    async def scenario() -> None:
        async with connect(account["personal_url"], {}, "2026-07-28") as client:
            record = await billing_via_tool(client)
            assert record["wallet_balance_usd"] == "12.50", record  # free calls remain: the wallet is untouched
            assert record["free_remaining_this_month"] == 999, record

    run(scenario)


@pytest.mark.parametrize("carrier", ["bearer", "x_api_key", "query"])
def test_billing_status_endpoint(server, account, carrier: str) -> None:
    url, headers = endpoint(server.base_url, account["personal_url"], carrier, account["api_key"])
    url = url.replace(f"{server.base_url}/", f"{server.base_url}/billing/status", 1)
    good = httpx.get(url, headers=headers, timeout=30)
    assert good.status_code == 200, good.text
    assert check_billing_record(good.json())["free_remaining_this_month"] == 1000

    bad_key = "svck_" + secrets.token_hex(32)
    url, headers = endpoint(server.base_url, account["personal_url"], carrier, bad_key)
    url = url.replace(f"{server.base_url}/", f"{server.base_url}/billing/status", 1)
    bad = httpx.get(url, headers=headers, timeout=30)
    assert bad.status_code == 401, (bad.status_code, bad.text)


def test_raw_http_errors(server, account) -> None:
    """The wire shapes behind the SDK errors: 401/-32001 for a bad key, 400/-32700 for a body that is not JSON."""
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    bad = httpx.post(f"{server.base_url}/u/svck_{secrets.token_hex(32)}", json=body, headers=accept, timeout=30)
    assert bad.status_code == 401, (bad.status_code, bad.text)
    assert bad.json()["error"]["code"] == -32001, bad.text
    assert bad.json()["error"]["message"], bad.text
    garbage = httpx.post(account["personal_url"], content=b"{not json", headers=accept, timeout=30)
    assert garbage.status_code == 400, (garbage.status_code, garbage.text)
    assert garbage.json()["error"]["code"] == -32700, garbage.text


def texts_of(result) -> str:
    return "\n".join(item.text for item in result.content if getattr(item, "type", None) == "text")


@pytest.mark.parametrize("mode", MODES)
def test_python_and_bash_in_a_session(server, account, mode: str) -> None:
    session = f"sdk-{secrets.token_hex(4)}"

    async def go() -> None:
        async with connect(account["personal_url"], {}, mode) as client:
            first = await client.call_tool("svc_write", {"code": "import math\nx = 6 * 7\nprint('set')", "session_id": session})
            assert not first.is_error, texts_of(first)
            assert texts_of(first) == "set\n"
            again = await client.call_tool("svc_write", {"code": "x, round(math.pi, 2)", "session_id": session})
            assert texts_of(again) == "(42, 3.14)", texts_of(again)
            assert again.structured_content["python"]["session"]["fresh"] is False
            bash = await client.call_tool("svc_write", {"bash": "echo $((6 * 7)); exit 2", "session_id": session})
            assert bash.is_error and "42" in texts_of(bash) and "exit status 2" in texts_of(bash), texts_of(bash)
            plot = await client.call_tool("svc_write", {"code": "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nNone"})
            assert [c.mime_type for c in plot.content if c.type == "image"] == ["image/png"], plot.content
            raised = await client.call_tool("svc_write", {"code": "raise ValueError('nope')"})
            assert raised.is_error and "ValueError: nope" in texts_of(raised)
            await client.call_tool("svc_write", {"session_id": session, "files": [{"path": "in/a.txt", "content": "payload"}]})
            read = await client.call_tool("svc_read", {"session_id": session, "path": "in/a.txt"})
            assert texts_of(read) == "payload", read

    run(go)


@pytest.mark.parametrize("mode", MODES)
def test_output_streams_as_progress(server, account, mode: str) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async def go() -> None:
        async with connect(account["personal_url"], {}, mode) as client:
            code = "import time\nfor i in range(3):\n    print(f'step {i}', flush=True)\n    time.sleep(0.3)"
            result = await client.call_tool("svc_write", {"code": code}, progress_callback=on_progress)
            assert not result.is_error, texts_of(result)
            assert texts_of(result) == "step 0\nstep 1\nstep 2\n"

    run(go)
    messages = "".join(message or "" for _, message in seen)
    assert "step 0" in messages and "step 2" in messages, seen
    progress = [p for p, _ in seen]
    assert progress == sorted(progress) and len(set(progress)) == len(progress), seen


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("same_client", [False, True], ids=["next-client", "same-client"])
def test_cancelling_a_call_interrupts_the_code(server, account, mode: str, same_client: bool) -> None:
    session = f"cancel-{secrets.token_hex(4)}"

    async def next_call(client) -> float:
        started = anyio.current_time()
        after = await client.call_tool("svc_write", {"code": "kept", "session_id": session})
        assert texts_of(after) == "'still here'", texts_of(after)
        return anyio.current_time() - started

    async def go() -> float:
        async with connect(account["personal_url"], {}, mode) as client:
            await client.call_tool("svc_write", {"code": "kept = 'still here'", "session_id": session})
            with anyio.move_on_after(1.0):
                await client.call_tool("svc_write", {"code": "import time\ntime.sleep(60)", "session_id": session})
                raise AssertionError("the call should have been cancelled")
            if same_client:
                # the cancelled call's answer must not confuse the client that cancelled it
                return await next_call(client)
        async with connect(account["personal_url"], {}, mode) as client:
            return await next_call(client)

    waited = run(go)
    # the sleeping cell was interrupted: the next call did not queue behind 60 s of sleep
    assert waited < 15, f"the next call waited {waited:.1f} s: the cancelled code kept running"
