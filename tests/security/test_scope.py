"""Scope holds on every path (issue 14, part 2).

Two projects, X (with a linked worktree and a subdirectory) and Y, and three identities: the
main agent (RECALLD_AGENT unset), agent `a` (RECALLD_AGENT=a), and a subagent of type
`reviewer` (a hook payload's agent_id/agent_type; RECALLD_SUBAGENT=reviewer for the CLI and
MCP). Each memory carries one code word, so what a caller reads is the set of words it gets
back. Every path is asked from every place as every identity: the CLI, the MCP tools through
build()'s wrappers, real hook processes, and history/retract/supersedes.
"""

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from recalld import memories
from recalld.mcp import tools as mcp
from recalld.capture import policies, decide
from recalld.cli.main import cli
from recalld.core import db, proposal_db, receipts, scope
from tests.helpers import REPO, run_recalld

# code word -> (project, scope, agent) it was written as
MEMORIES = {
    "walrus": ("x", "project", "main"),
    "falcon": ("x", "agent", "main"),
    "badger": ("x", "agent", "a"),
    "heron": ("x", "agent", "main/reviewer"),
    "otter": ("y", "project", "main"),
    "gecko": ("y", "agent", "main"),
    "lynx": ("y", "agent", "a"),
    "panda": ("y", "shared", "a"),
}
WORDS = re.compile(r"\b(" + "|".join(MEMORIES) + r")\b")
PLACES = {"x": "x", "sub": "x", "wt": "x", "y": "y"}  # where a caller stands -> its project
IDENTITIES = {"main": "main", "a": "a", "subagent": "main/reviewer"}
ENV = {"main": {}, "a": {"RECALLD_AGENT": "a"}, "subagent": {"RECALLD_SUBAGENT": "reviewer"}}
PAYLOAD = {"main": {}, "a": {}, "subagent": {"agent_id": "agent-7", "agent_type": "reviewer"}}
CALLERS = [(place, who) for place in PLACES for who in IDENTITIES]


def readable(project: str, who: str) -> set:
    """What the rule says a caller in `project` as `who` may read."""
    agent = IDENTITIES[who]
    return {w for w, (p, s, a) in MEMORIES.items()
            if s == "shared" or (p == project and (s == "project" or a == agent))}


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


@pytest.fixture
def world(home, tmp_path, monkeypatch):
    monkeypatch.delenv("RECALLD_SUBAGENT", raising=False)
    x, y = tmp_path / "x", tmp_path / "y"
    for p in (x, y):
        p.mkdir()
        git("init", "-q", str(p), cwd=tmp_path)
    (x / "README").write_text("x")
    git("add", "README", cwd=x)
    git("commit", "-qm", "init", cwd=x)
    wt = tmp_path / "x-wt"
    git("worktree", "add", "-q", str(wt), cwd=x)
    (x / "src" / "deep").mkdir(parents=True)
    dirs = {"x": str(x), "sub": str(x / "src" / "deep"), "wt": str(wt), "y": str(y)}
    projects = {"x": scope.resolve_project(str(x)), "y": scope.resolve_project(str(y))}
    assert projects["x"] != projects["y"]
    conn = db.connect()
    ids = {}
    for word, (p, s, agent) in MEMORIES.items():
        sc = scope.Scope(projects[p], agent)
        ids[word] = memories.remember(conn, f"kumquat rule {word}", sc, scope=s, check_similar=False).memory["id"]
    conn.close()
    return {"dirs": dirs, "projects": projects, "ids": ids, "tmp": tmp_path}


def count_memories() -> int:
    conn = db.connect()
    try:
        return conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    finally:
        conn.close()


def current(mid: int) -> bool:
    conn = db.connect()
    try:
        return memories.get(conn, mid)["invalid_at"] is None
    finally:
        conn.close()


# --- the resolver --------------------------------------------------------------------------


@pytest.mark.parametrize("place,who", CALLERS)
def test_resolver_gives_each_place_and_identity_its_scope(world, place, who):
    sc = scope.resolve(world["dirs"][place], PAYLOAD[who], ENV[who])
    assert sc == scope.Scope(world["projects"][PLACES[place]], IDENTITIES[who])
    # outside a hook the subagent is named by the environment, and lands on the same identity
    assert scope.resolve(world["dirs"][place], None, ENV[who]) == sc


@pytest.mark.parametrize("payload,env,expected", [
    ({"agent_id": "s1", "agent_type": "a"}, {}, "main/a"),  # cannot claim a's private notes
    ({"agent_id": "s1", "agent_type": "main"}, {}, "main/main"),  # nor the main agent's
    ({"agent_id": "s1", "agent_type": "a"}, {"RECALLD_AGENT": "a"}, "a/a"),
    ({"agent_id": "s1", "agent_type": "reviewer/../a"}, {}, "main/reviewer-..-a"),  # no deeper identity
    ({"agent_id": "s1", "agent_type": "reviewer"}, {"RECALLD_AGENT": "a"}, "a/reviewer"),
    ({"agent_id": "s1"}, {}, "main/subagent"),
    ({"agent_id": "s1", "agent_type": ["a"]}, {}, "main/subagent"),
    ({"agent_id": "s1", "agent_type": " / "}, {}, "main/subagent"),
    ({"agent_id": 7, "agent_type": "reviewer"}, {}, "main/reviewer"),
    ({"agent_type": "a"}, {}, "main"),  # agent_type outside a subagent is ignored
    ({"agent_id": "", "agent_type": "a"}, {}, "main"),
    ({"agent_id": "s1", "agent_type": "x" * 500}, {}, "main/" + "x" * scope.MAX_SUBAGENT_TYPE),
    ({}, {"RECALLD_AGENT": "  a  "}, "a"),
    ({}, {"RECALLD_SUBAGENT": "reviewer", "RECALLD_AGENT": "a"}, "a/reviewer"),
])
def test_a_payload_can_only_name_a_subagent_of_its_main_agent(payload, env, expected):
    assert scope.resolve_agent(payload, env) == expected


def test_narrow_stays_inside_the_bound_project(world):
    d = world["dirs"]
    bound = scope.resolve(d["x"], None, {})
    for place in ("x", "sub", "wt"):
        assert scope.narrow(bound, d[place]) is bound
    assert scope.narrow(bound, "") is bound and scope.narrow(bound, None) is bound
    assert scope.narrow(bound, "src/deep", base=d["x"]) is bound  # relative to where it started
    for bad in (d["y"], "../y", str(world["tmp"]), "/", d["y"] + "/../x-wt/../y"):
        with pytest.raises(scope.ScopeError, match="not in this server's project"):
            scope.narrow(bound, bad, base=d["x"])
    for bad in (3, ["x"], "x\x00y"):
        with pytest.raises(scope.ScopeError):
            scope.narrow(bound, bad)


# --- CLI: the user at a shell is trusted with every project (`--cwd`) -------------------------


def cli_run(args, who):
    env = {"RECALLD_AGENT": None, "RECALLD_SUBAGENT": None, **ENV[who]}
    return CliRunner().invoke(cli, args, env=env)


@pytest.mark.parametrize("place,who", CALLERS)
def test_cli_search_reads_what_the_rule_allows(world, place, who):
    res = cli_run(["search", "kumquat", "--cwd", world["dirs"][place], "--json", "--limit", "50"], who)
    assert res.exit_code == 0, res.output
    assert set(WORDS.findall(res.stdout)) == readable(PLACES[place], who)


def test_cli_in_a_subprocess_standing_in_a_worktree(world):
    """No --cwd: the process's own directory is the project, as for a user at a shell."""
    env = dict(os.environ, RECALLD_AGENT="a", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "recalld", "search", "kumquat", "--json"], capture_output=True,
                       env=env, cwd=world["dirs"]["wt"], timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert set(WORDS.findall(p.stdout.decode())) == readable("x", "a")


# --- history / retract / supersedes: visibility is checked, existence never leaks -------------


def _not_found(res, mid):
    assert res.exit_code != 0
    assert res.stderr.strip() == f"recalld: m{mid} does not exist", res.stderr


@pytest.mark.parametrize("place,who", CALLERS)
def test_history_retract_supersedes_hide_what_the_caller_cannot_read(world, place, who):
    cwd, ids, allowed = world["dirs"][place], world["ids"], readable(PLACES[place], who)
    missing = max(ids.values()) + 100
    _not_found(cli_run(["history", str(missing), "--cwd", cwd], who), missing)
    before = count_memories()
    for word, mid in ids.items():
        hist = cli_run(["history", f"m{mid}", "--cwd", cwd, "--json"], who)
        if word in allowed:
            assert hist.exit_code == 0, hist.output
            assert [m["id"] for m in json.loads(hist.stdout)] == [mid]
            continue
        # the same answer as for an id that was never written
        _not_found(hist, mid)
        _not_found(cli_run(["retract", str(mid), "--why", "probe", "--cwd", cwd], who), mid)
        _not_found(cli_run(["remember", "kumquat probe", "--supersedes", str(mid), "--cwd", cwd], who), mid)
        assert current(mid)
    assert count_memories() == before


@pytest.mark.parametrize("who", IDENTITIES)
def test_retract_and_supersede_work_on_what_the_caller_reads(world, who):
    cwd = world["dirs"]["wt"]
    own = {"main": "falcon", "a": "badger", "subagent": "heron"}[who]
    res = cli_run(["retract", str(world["ids"][own]), "--why", "moved", "--cwd", cwd], who)
    assert res.exit_code == 0, res.output
    res = cli_run(["remember", "kumquat rule walrus two", "--supersedes", str(world["ids"]["walrus"]),
                   "--cwd", cwd, "--json"], who)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["superseded"] == [world["ids"]["walrus"]]


def test_history_chain_holds_only_readable_memories(home, world):
    """X: A (project) is superseded by agent a's private B, which a supersedes with C (project)."""
    conn = db.connect()
    px = world["projects"]["x"]
    main_sc, a_sc, rev_sc = (scope.Scope(px, i) for i in ("main", "a", "main/reviewer"))
    a = memories.remember(conn, "kumquat chain one", main_sc, check_similar=False).memory["id"]
    b = memories.remember(conn, "kumquat chain two", a_sc, scope="agent", supersedes=[a], check_similar=False).memory["id"]
    c = memories.remember(conn, "kumquat chain three", a_sc, supersedes=[b], check_similar=False).memory["id"]
    assert [m["id"] for m in memories.history(conn, a, a_sc)] == [a, b, c]
    for sc in (main_sc, rev_sc):
        assert [m["id"] for m in memories.history(conn, a, sc)] == [a]
        assert [m["id"] for m in memories.history(conn, c, sc)] == [c]
        with pytest.raises(memories.StoreError, match=f"^m{b} does not exist$"):
            memories.history(conn, b, sc)
    y_sc = scope.Scope(world["projects"]["y"], "a")
    for mid in (a, b, c):
        with pytest.raises(memories.StoreError, match=f"^m{mid} does not exist$"):
            memories.history(conn, mid, y_sc)
    conn.close()


# --- MCP: the server's scope is the project it was started for --------------------------------


class Refused(Exception):
    pass


def call(server, name, args):
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        res = asyncio.run(server.call_tool(name, args))
    except ToolError as e:  # the agent's error text, less the server's "Error executing tool NAME: "
        raise Refused(str(e).removeprefix(f"Error executing tool {name}: ")) from None
    if res.is_error:
        raise Refused(res.content[0].text)
    sc = res.structured_content
    if sc is not None:
        return sc["result"] if set(sc) == {"result"} else sc
    return json.loads(res.content[0].text)


@pytest.mark.parametrize("start,who", CALLERS)
def test_mcp_search_is_bound_to_the_servers_project(world, start, who):
    d = world["dirs"]
    server = mcp.build(root=d[start], env=ENV[who])
    allowed = readable(PLACES[start], who)
    for tool_cwd in (None, "x", "sub", "wt", "y"):
        args = {"query": "kumquat", "limit": 50}
        if tool_cwd:
            args["cwd"] = d[tool_cwd]
        if tool_cwd is None or PLACES[tool_cwd] == PLACES[start]:
            hits = call(server, "search", args)
            assert {WORDS.search(h["text"]).group(1) for h in hits} == allowed, (start, who, tool_cwd)
        else:
            with pytest.raises(Refused, match="not in this server's project"):
                call(server, "search", args)


@pytest.mark.parametrize("who", IDENTITIES)
def test_mcp_remember_cannot_cross_projects(world, who):
    d = world["dirs"]
    server = mcp.build(root=d["y"], env=ENV[who])
    before = count_memories()
    for place in ("x", "sub", "wt"):
        for scope_name in ("project", "agent", "shared"):
            with pytest.raises(Refused, match="not in this server's project"):
                call(server, "remember", {"text": "kumquat planted", "cwd": d[place], "scope_name": scope_name})
    assert count_memories() == before
    made = call(server, "remember", {"text": "kumquat note from y", "scope_name": "agent"})["changed"][0]
    assert (made["project"], made["agent"]) == (world["projects"]["y"], IDENTITIES[who])
    # started in a worktree of X, the server writes X, as the identity of its start
    server_wt = mcp.build(root=d["wt"], env=ENV[who])
    made = call(server_wt, "remember", {"text": "kumquat note from x", "scope_name": "agent", "cwd": d["sub"]})
    assert (made["changed"][0]["project"], made["changed"][0]["agent"]) == (world["projects"]["x"], IDENTITIES[who])


@pytest.mark.parametrize("start,who", CALLERS)
def test_mcp_history_retract_supersedes_check_visibility(world, start, who):
    server = mcp.build(root=world["dirs"][start], env=ENV[who])
    allowed, ids = readable(PLACES[start], who), world["ids"]
    missing = max(ids.values()) + 100
    with pytest.raises(Refused, match=f"^m{missing} does not exist$"):
        call(server, "history", {"memory_id": missing})
    before = count_memories()
    for word, mid in ids.items():
        if word in allowed:
            assert [m["id"] for m in call(server, "history", {"memory_id": mid})] == [mid]
            continue
        for name, args in (("history", {"memory_id": mid}), ("retract", {"memory_id": mid, "why": "probe"}),
                           ("remember", {"text": "kumquat probe", "supersedes": [mid]})):
            with pytest.raises(Refused, match=f"^m{mid} does not exist$"):
                call(server, name, args)
        assert current(mid)
    assert count_memories() == before


def draft_in_x(world) -> int:
    conn = db.connect()
    r = receipts.new("proposer", "test")
    draft = policies.Draft(kind="fact", text="kumquat drafts in project X are X's text.", why="t", confidence=0.9)
    pid, = proposal_db.store_pass(conn, r, session="sx", source="/t.jsonl", from_line=1, to_line=2, boundary_id=None,
                             window_chars=10, drafts=[draft], project=world["projects"]["x"], agent="main",
                             model="test")
    conn.close()
    return pid


def test_every_mcp_tool_goes_through_the_servers_scope(world):
    """Each tool in TOOLS asks the one scope check (the server's binding) before it reads or
    writes anything: called outside a server, every one refuses and nothing changes. A tool
    added to TOOLS that reads the store without it fails here."""
    pid, mid = draft_in_x(world), world["ids"]["walrus"]
    args = {"search": {"query": "kumquat"}, "show": {"memory_id": mid},
            "remember": {"text": "kumquat probe note", "supersedes": [mid]},
            "history": {"memory_id": mid}, "retract": {"memory_id": mid, "why": "probe"},
            "proposals_list": {"state": "all"}, "proposals_show": {"proposal_id": str(pid)},
            "proposals_approve": {"proposal_id": str(pid)},
            "proposals_edit": {"proposal_id": str(pid), "text": "kumquat rewritten outside"},
            "proposals_reject": {"proposal_id": str(pid), "reason": "probe"}}
    assert sorted(args) == sorted(fn.__name__ for fn in mcp.TOOLS), "a new tool needs its probe here"
    before = count_memories()
    conn = db.connect()
    try:
        for fn in mcp.TOOLS:
            with pytest.raises(memories.StoreError, match="no server scope"):
                fn(conn, **args[fn.__name__])
        assert decide.get(conn, pid)["state"] == "pending"
    finally:
        conn.close()
    assert count_memories() == before and current(mid)


def test_mcp_proposals_of_another_project_do_not_exist(world):
    pid = draft_in_x(world)
    y = mcp.build(root=world["dirs"]["y"], env={})
    assert call(y, "proposals_list", {"state": "all"}) == []
    with pytest.raises(Refused, match="not in this server's project"):
        call(y, "proposals_list", {"cwd": world["dirs"]["x"]})
    for name, args in (("proposals_show", {}), ("proposals_approve", {}), ("proposals_reject", {"reason": "r"}),
                       ("proposals_edit", {"text": "kumquat rewritten by y"})):
        with pytest.raises(Refused, match="does not exist"):
            call(y, name, {"proposal_id": str(pid), **args})
    conn = db.connect()
    assert decide.get(conn, pid)["state"] == "pending"
    conn.close()
    x = mcp.build(root=world["dirs"]["wt"], env={})
    assert [p["id"] for p in call(x, "proposals_list", {"state": "all"})] == [pid]
    assert call(x, "proposals_show", {"proposal_id": str(pid)})["id"] == pid


def test_mcp_identity_is_read_at_start(world, monkeypatch):
    server = mcp.build(root=world["dirs"]["x"])  # this process's environment, now
    monkeypatch.setenv("RECALLD_AGENT", "a")  # a later change does not move the server
    words = {WORDS.search(h["text"]).group(1) for h in call(server, "search", {"query": "kumquat", "limit": 50})}
    assert words == readable("x", "main")


# --- hooks: real processes, the payload may only name a subagent ------------------------------


def hook_words(place_dir, extra, env=None):
    # A session of its own per read: a session is never told the same memory twice.
    p = {"session_id": f"s-scope-{os.urandom(4).hex()}", "transcript_path": "/t", "cwd": place_dir,
         "hook_event_name": "UserPromptSubmit",
         "prompt": "kumquat rule", **extra}
    proc = run_recalld(["hook", "prompt-submit"], json.dumps(p).encode(), env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out.strip() else ""
    return set(WORDS.findall(ctx))


def last_receipt_agent():
    conn = db.connect()
    try:
        return receipts.read(conn, limit=1)[0]["agent"]
    finally:
        conn.close()


@pytest.mark.parametrize("place,who", CALLERS)
def test_hooks_read_what_the_rule_allows(world, place, who):
    env = {"RECALLD_AGENT": "a"} if who == "a" else None
    assert hook_words(world["dirs"][place], PAYLOAD[who], env) == readable(PLACES[place], who)
    assert last_receipt_agent() == IDENTITIES[who]


@pytest.mark.parametrize("extra,env", [
    ({"agent_id": "s1", "agent_type": "a"}, None),
    ({"agent_id": "s1", "agent_type": "main"}, None),
    ({"agent_id": "s1", "agent_type": "reviewer/../a"}, None),
    ({"agent_id": "s1", "agent_type": "main/reviewer"}, None),
    ({"agent_id": "s1", "agent_type": "reviewer"}, {"RECALLD_AGENT": "a"}),
    ({"agent_id": "s1", "agent_type": "a"}, {"RECALLD_AGENT": "a"}),
])
def test_a_hook_payload_cannot_read_another_agents_notes(world, extra, env):
    for place in ("x", "y"):
        assert hook_words(world["dirs"][place], extra, env) == {w for w in readable(PLACES[place], "main")
                                                               if MEMORIES[w][1] != "agent"}


def test_what_a_subagent_writes_its_hooks_read_back(world):
    """A subagent writes with RECALLD_SUBAGENT (CLI or MCP); its hooks, whose payload names the
    same subagent, read it; the main agent and other identities do not."""
    d = world["dirs"]
    notes = [("quail", {"RECALLD_SUBAGENT": "reviewer"}, "cli"),
             ("marten", {"RECALLD_SUBAGENT": "reviewer", "RECALLD_AGENT": "a"}, "cli"),
             ("ibis", {"RECALLD_SUBAGENT": "reviewer"}, "mcp")]
    for word, env, path in notes:
        if path == "cli":
            p = run_recalld(["remember", f"quince note {word}", "--scope", "agent", "--cwd", d["wt"]], env=env)
            assert p.returncode == 0, p.stderr.decode()
        else:
            call(mcp.build(root=d["sub"], env=env), "remember", {"text": f"quince note {word}", "scope_name": "agent"})
    new_words = re.compile(r"\b(quail|marten|ibis)\b")

    def read(extra, env=None):
        p = {"session_id": "s2", "cwd": d["x"], "hook_event_name": "UserPromptSubmit", "prompt": "quince note",
             **extra}
        proc = run_recalld(["hook", "prompt-submit"], json.dumps(p).encode(), env=env)
        assert proc.returncode == 0
        return set(new_words.findall(proc.stdout.decode()))

    reviewer = {"agent_id": "agent-9", "agent_type": "reviewer"}
    assert read(reviewer) == {"quail", "ibis"}
    assert read(reviewer, {"RECALLD_AGENT": "a"}) == {"marten"}
    assert read({}) == set() and read({}, {"RECALLD_AGENT": "a"}) == set()
    assert read({"agent_id": "agent-9", "agent_type": "other"}) == set()
