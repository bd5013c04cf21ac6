"""`recalld mcp` is ready before the mcp SDK has loaded (issue 13.8): initialize and tools/list
come from recalld/mcp/manifest.py, which must be exactly what the SDK answers; every tool call
is the SDK's, relayed; a SDK that cannot load is an error the client reads, not a hang."""

import json
import os
import subprocess
import sys
import time

from recalld.mcp import stdio as mcp_stdio
from recalld.mcp.manifest import MANIFEST
from tests.helpers import REPO


def init(mid=1, version="2025-06-18"):
    return {"jsonrpc": "2.0", "id": mid, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def talk(project, requests, first_on_path=None, want=None, timeout=60):
    """Start `recalld mcp` the way an agent does, send `requests`, read `want` answers (default:
    one per request with an id); returns [(seconds since start, message)]."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (first_on_path, str(REPO), os.environ.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "recalld", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, cwd=str(project), env=e)
    p.stdin.write("".join(json.dumps(r) + "\n" for r in requests).encode())
    p.stdin.flush()
    want = want if want is not None else sum(1 for r in requests if "id" in r)
    out = []
    try:
        while len(out) < want:
            line = p.stdout.readline()
            assert line, f"recalld mcp closed after {out}"
            out.append((time.perf_counter() - t0, json.loads(line)))
    finally:
        p.stdin.close()
        p.wait(timeout=timeout)
    return out


def test_the_manifest_is_what_the_sdk_answers():
    assert mcp_stdio.manifest_from_sdk() == MANIFEST, "stale: run python3 -m recalld.mcp.stdio --write-manifest"


def test_the_early_answers_equal_the_sdk_answers(home, project):
    requests = [init(1, "2025-06-18"), INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "ping"}]
    fast = {m["id"]: m for _, m in talk(project, requests)}
    sdk = {m["id"]: m for m in mcp_stdio.sdk_answers(requests, cwd=str(project))}
    assert fast == sdk
    # A version the SDK does not speak: its latest, as the SDK negotiates.
    (_, m), = talk(project, [init(7, "1999-01-01")])
    assert m["result"]["protocolVersion"] == MANIFEST["latest"]


def test_tool_calls_go_to_the_sdk(home, project):
    requests = [init(), INITIALIZED,
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "remember", "arguments": {"text": "The exporter writes cents as integers."}}},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                 "params": {"name": "history", "arguments": {"memory_id": 99}}}]
    got = {m["id"]: m for _, m in talk(project, requests)}
    assert json.loads(got[2]["result"]["content"][0]["text"])["id"] == 1 and not got[2]["result"]["isError"]
    assert got[4]["result"]["isError"] and "does not exist" in got[4]["result"]["content"][0]["text"]
    assert [t["name"] for t in got[3]["result"]["tools"]] == [t["name"] for t in MANIFEST["tools_list"]["tools"]]


def test_tools_list_is_answered_before_the_sdk_loads_and_a_broken_sdk_is_an_error(home, project, tmp_path):
    """A stand-in `mcp` package that takes 4 s to fail on import: tools/list is answered at once
    from the manifest; the tool call waits for the SDK and gets the reason it could not start."""
    shim = tmp_path / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("import time\ntime.sleep(4)\nraise ImportError('no SDK in this test')\n")
    requests = [init(), INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "x"}}}]
    got = {m["id"]: (t, m) for t, m in talk(project, requests, first_on_path=str(tmp_path / "shim"))}
    t_list, m_list = got[2]
    t_call, m_call = got[3]
    assert m_list["result"] == MANIFEST["tools_list"] and t_list < t_call
    assert t_call - t_list > 2, (t_list, t_call)  # the list did not wait for the SDK
    assert m_call["error"]["code"] == mcp_stdio.INTERNAL_ERROR and "no SDK in this test" in m_call["error"]["message"]


def test_options_the_fast_path_does_not_know_go_to_click(home, project):
    p = subprocess.run([sys.executable, "-m", "recalld", "mcp", "--help"], capture_output=True, cwd=str(project),
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert p.returncode == 0 and b"--project" in p.stdout
    assert mcp_stdio.main(["--project", str(project / "missing")]) == -1


CLAUDE_CODE = {"name": "claude-code", "title": "Claude Code", "version": "2.1.332"}


def claude_code_opening(version="2026-07-28"):
    """What Claude Code 2.1.332 sends first (recorded from the real client): a discover probe,
    a listen for list changes, discover again, then the three lists, all in the stateless
    protocol's envelope."""
    reqs = mcp_stdio.modern_requests(version, client=CLAUDE_CODE)
    probe = dict(reqs[0], id="server-discover-probe-1")
    listen = {"jsonrpc": "2.0", "id": "listen:0", "method": "subscriptions/listen",
              "params": {"_meta": reqs[0]["params"]["_meta"],
                         "notifications": {"toolsListChanged": True, "promptsListChanged": True,
                                           "resourcesListChanged": True}}}
    return [probe, listen, *reqs]


def by_key(messages):
    return {m.get("id", m.get("method")): m for m in messages}


def test_the_stateless_opening_is_answered_as_the_sdk_answers_it(home, project):
    opening = claude_code_opening()
    # A ping last: the SDK answers it after it has taken the listen (the pipe keeps the order),
    # so an acknowledgement sent twice would arrive before it.
    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"_meta": opening[0]["params"]["_meta"]}}
    lines = [m for _, m in talk(project, [*opening, ping])]
    sdk = by_key(mcp_stdio.sdk_answers([*opening, ping], cwd=str(project)))
    fast = by_key(lines)
    assert set(fast) == set(sdk) == {"server-discover-probe-1", "notifications/subscriptions/acknowledged", 1, 2, 3, 4, 5}
    assert fast == sdk
    assert len(lines) == 7


def test_the_stateless_opening_does_not_wait_for_the_sdk(home, project, tmp_path):
    shim = tmp_path / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("import time\ntime.sleep(4)\nraise ImportError('no SDK in this test')\n")
    opening = claude_code_opening()
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"_meta": opening[0]["params"]["_meta"], "name": "search", "arguments": {"query": "x"}}}
    got = {m.get("id", m.get("method")): (t, m) for t, m in talk(project, [*opening, call],
                                                                  first_on_path=str(tmp_path / "shim"), want=8)}
    t_list, m_list = got[4]
    t_call, m_call = got[9]
    assert m_list["result"] == MANIFEST["modern"]["tools_list"]
    assert [t["name"] for t in m_list["result"]["tools"]] == [t["name"] for t in MANIFEST["tools_list"]["tools"]]
    assert got["notifications/subscriptions/acknowledged"][1]["params"]["_meta"] == {mcp_stdio.SUBSCRIPTION_ID: "listen:0"}
    assert t_call - t_list > 2, (t_list, t_call)
    assert "no SDK in this test" in m_call["error"]["message"]
    # The SDK never came up, so the listen it was to hold fails too, and says why.
    assert "no SDK in this test" in got["listen:0"][1]["error"]["message"]
    assert len(got) == 8


def test_a_stateless_version_the_manifest_does_not_hold_goes_to_the_sdk(home, project, tmp_path):
    shim = tmp_path / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("import time\ntime.sleep(3)\nraise ImportError('no SDK in this test')\n")
    (_, first), = talk(project, mcp_stdio.modern_requests("2099-01-01")[:1], first_on_path=str(tmp_path / "shim"))
    assert "no SDK in this test" in first["error"]["message"]
