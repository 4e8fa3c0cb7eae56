"""Named keys through the official Python MCP SDK: a key made by `toolgate key create` works at
its own personal URL in both protocol generations, its calls are metered on the account (the
first key's billing sees them), a read-only key lists and calls only the read tool (a refused
call is a free tool error), and a revoked key is refused with -32001."""

from __future__ import annotations

import uuid

import pytest

from test_sdk import MODES, billing_via_tool, check_tools, connect, expect_mcp_error, run


def create_key(server, account: dict, *extra: str) -> dict:
    key = server.cli("key", "create", "--email", account["email"], "--name", f"agent-{uuid.uuid4().hex[:8]}", *extra)
    assert key["personal_url"] == f"{server.base_url}/u/{key['api_key']}", key
    assert key["key_id"].startswith("key_"), key
    return key


@pytest.mark.parametrize("mode", MODES)
def test_a_named_key_is_metered_on_its_account(server, account, mode: str) -> None:
    key = create_key(server, account)

    async def scenario() -> None:
        async with connect(key["personal_url"], {}, mode) as client:
            check_tools((await client.list_tools()).tools)
            record = await billing_via_tool(client)
            assert record["free_remaining_this_month"] == 999, record
        async with connect(account["personal_url"], {}, mode) as client:
            record = await billing_via_tool(client)
            assert record["free_remaining_this_month"] == 998, "the first key sees the named key's call"

    run(scenario)
    revoked = server.cli("key", "revoke", "--email", account["email"], "--key", key["key_id"])
    assert revoked["revoked"] is True, revoked

    async def refused() -> None:
        await expect_mcp_error(-32001, key["personal_url"], {}, mode, lambda c: c.list_tools())

    run(refused)


@pytest.mark.parametrize("mode", MODES)
def test_a_read_only_key_sees_and_calls_the_read_tool_only(server, account, mode: str) -> None:
    key = create_key(server, account, "--tools", "read")

    async def scenario() -> None:
        async with connect(key["personal_url"], {}, mode) as client:
            tools = (await client.list_tools()).tools
            assert [tool.name for tool in tools] == ["svc_read"], [tool.name for tool in tools]
            result = await client.call_tool("svc_write", {"secret_set": {"name": "K", "value": "v"}})
            assert result.is_error, result
            texts = " ".join(item.text for item in result.content if getattr(item, "type", None) == "text")
            assert "svc_read" in texts, texts
            record = await billing_via_tool(client)
            assert record["free_remaining_this_month"] == 999, "the refused call was free"

    run(scenario)
