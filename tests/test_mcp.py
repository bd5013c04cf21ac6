"""`recalld mcp` over real stdio with the mcp client: the tools call the same library."""

import asyncio
import json
import os
import sys

from tests.conftest import REPO


def _call(home, project, calls):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO))
    params = StdioServerParameters(command=sys.executable, args=["-m", "recalld", "mcp"], env=env)

    async def go():
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                tools = {t.name for t in (await s.list_tools()).tools}
                results = []
                for name, args in calls:
                    res = await s.call_tool(name, args)
                    results.append(res)
                return tools, results

    return asyncio.run(go())


def _payload(res):
    assert not res.is_error, res.content
    sc = res.structured_content
    if sc is not None:
        return sc["result"] if set(sc) == {"result"} else sc
    return json.loads(res.content[0].text)


def test_mcp_tools_round_trip(home, project):
    tools, results = _call(home, project, [
        ("remember", {"text": "The exporter writes cents as integers, never floats.", "kind": "constraint",
                      "cwd": str(project)}),
        ("remember", {"text": "The exporter writes cents as integer strings since the CSV change.",
                      "supersedes": [1], "cwd": str(project), "thread": "exporter"}),
        ("search", {"query": "exporter cents floats", "cwd": str(project)}),
        ("history", {"memory_id": 1}),
        ("remember", {"text": "", "cwd": str(project)}),
    ])
    rem, rem2, found, hist, bad = results
    assert {"search", "remember", "history", "retract"} <= tools
    assert _payload(rem)["id"] == 1
    assert _payload(rem2)["superseded"] == [1] and _payload(rem2)["changed"][0]["thread"] == "exporter"
    assert [h["id"] for h in _payload(found)] == [2]
    assert [m["id"] for m in _payload(hist)] == [1, 2]
    assert bad.is_error and "empty" in bad.content[0].text
