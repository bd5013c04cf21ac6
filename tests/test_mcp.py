"""`recalld mcp` over real stdio with the mcp client: the tools call the same library."""

import asyncio
import json
import os
import subprocess
import sys

from tests.helpers import REPO


def _call(home, project, calls, options=()):
    """Start `recalld mcp` in `project` (the way an agent starts it in its project) and call
    the tools in order."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO))
    params = StdioServerParameters(command=sys.executable, args=["-m", "recalld", "mcp", *options], env=env,
                                   cwd=str(project))

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


def test_mcp_server_keeps_to_the_project_it_was_started_for(home, project, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    _, (mine,) = _call(home, project, [("remember", {"text": "The ledger rounds half to even.",
                                                        "scope_name": "agent"})])
    mid = _payload(mine)["id"]
    # started in another project: the first project's memories are not there, and saying so
    # with `cwd` is an error the agent sees, for reads and for writes
    _, (found, crossed, wrote, hist, gone) = _call(home, other, [
        ("search", {"query": "ledger rounds"}),
        ("search", {"query": "ledger rounds", "cwd": str(project)}),
        ("remember", {"text": "The ledger rounds up.", "cwd": str(project / "src")}),
        ("history", {"memory_id": mid}),
        ("history", {"memory_id": mid + 50}),
    ])
    assert _payload(found) == []
    for res in (crossed, wrote):
        assert res.is_error and "not in this server's project" in res.content[0].text
    assert hist.is_error and gone.is_error
    assert hist.content[0].text.replace(str(mid), "N") == gone.content[0].text.replace(str(mid + 50), "N")
    # --project names the project explicitly, whatever the directory it starts in
    _, (found,) = _call(home, other, [("search", {"query": "ledger rounds"})], options=["--project", str(project)])
    assert [h["id"] for h in _payload(found)] == [mid]
