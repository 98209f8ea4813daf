"""The app as an MCP server, through the official `mcp` client over streamable HTTP against the
shared live app (`python app.py`): its five tools, a lossless comparison, a clear error."""

from __future__ import annotations

import ast
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from specviz.ui.page import mcp_enabled

pytestmark = pytest.mark.slow

mcp = pytest.importorskip("mcp")
from mcp.client.streamable_http import streamable_http_client

TOOLS = {"compare", "presets", "examples", "example", "pair_state"}


def _session(url: str, work):
    """Run `work(session)` in an initialized MCP client session to the app's MCP endpoint, in a
    thread of its own: Playwright's sync API (the browser tests, in the same worker) keeps an
    event loop running in this one."""
    async def main():
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _), \
                mcp.ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(lambda: asyncio.run(main())).result()


def _text(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


def _data(result):
    """A tool's result as data. Gradio's MCP server sends a returned dict or list as its Python
    literal (`str()`: True, None, single quotes), not as JSON; the fields are the JSON's."""
    return ast.literal_eval(_text(result))


def test_the_public_api_is_the_mcp_tools_and_nothing_else(live_app):
    url, log = live_app
    listed = _session(url, lambda session: session.list_tools())
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS  # the page's private events stay out, as they are out of the API
    compare = tools["compare"]
    assert "target passes" in compare.description and "python -m specviz compare --json" in compare.description
    assert {"prompt", "preset", "max_new_tokens", "modes", "temperature", "seed"} <= set(
        compare.inputSchema["properties"])
    assert "lossless" in compare.description
    # the modes a client may ask for, as the registry has them (not a list written by hand)
    from specviz.decoding.modes import mode_grammar

    assert mode_grammar() in json.dumps(compare.inputSchema["properties"]["modes"]) + compare.description
    assert "Traceback" not in log.read_text()


def test_compare_returns_a_lossless_comparison_and_bad_input_a_clear_error(live_app):
    url, log = live_app

    async def work(session):
        good = await session.call_tool("compare", {"prompt": "Write a haiku about tea.", "max_new_tokens": 8,
                                                   "modes": "static:3,dynamic:0.4,oracle"})
        bad = await session.call_tool("compare", {"prompt": "Hi", "max_new_tokens": 8, "modes": "static:0"})
        presets = await session.call_tool("presets", {})
        return good, bad, presets

    good, bad, presets = _session(url, work)
    assert not good.isError, _text(good)
    comparison = _data(good)
    modes = {m["policy"]: m for m in comparison["modes"]}
    assert set(modes) == {"static", "dynamic", "oracle"}
    assert all(m["lossless"] is True for m in modes.values())
    assert modes["oracle"]["target_passes"] <= modes["static"]["target_passes"]
    assert all(m["target_passes"] == len(m["rounds"]) for m in modes.values())
    assert comparison["baseline"]["target_passes"] == len(comparison["baseline"]["token_ids"])

    assert bad.isError
    message = _text(bad)
    assert "between 1 and" in message, message  # the API's own one-line message
    assert "Traceback" not in message and "\n" not in message.strip(), message

    names = [p["name"] for p in _data(presets)]
    assert "smollm2-135m-int8" in names
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize(("value", "on"), [(None, True), ("1", True), ("0", False), (" 0 ", False), ("yes", True)])
def test_a_variable_turns_mcp_off(value, on):
    assert mcp_enabled({} if value is None else {"SPECVIZ_MCP": value}) is on


def test_a_compare_naming_too_many_modes_or_one_twice_is_refused_at_once(live_app):
    """1250 modes, or one mode twice, would hold the models for everyone: refused in a second,
    and the comparison sent right after runs (nothing was left holding the models)."""
    url, log = live_app

    async def work(session):
        refused = []
        for modes in ("static:5," * 1250, "static:5,dynamic:0.4,static:5"):
            started = time.monotonic()
            result = await session.call_tool("compare", {"prompt": "Hi", "max_new_tokens": 8, "modes": modes})
            refused.append((result, time.monotonic() - started))
        after = await session.call_tool("compare", {"prompt": "Hi", "max_new_tokens": 4, "modes": "static:2"})
        return refused, after

    refused, after = _session(url, work)
    (many, many_s), (twice, twice_s) = refused
    assert many.isError and "1250 modes given; at most 8" in _text(many), _text(many)
    assert twice.isError and "named twice" in _text(twice), _text(twice)
    assert many_s < 1.0 and twice_s < 1.0, (many_s, twice_s)
    assert not after.isError, _text(after)
    assert [m["policy"] for m in _data(after)["modes"]] == ["static"]
    assert "Traceback" not in log.read_text()
