"""`recalld mcp`: the agent-facing tools over MCP stdio (mcp 2.x, MCPServer).

The tools call the same library functions as the CLI. Each is a plain function whose first
parameter is the store connection; `TOOLS` lists them, and `build()` wraps each one so the
connection is opened and closed, and a store or proposal error reaches the agent as the tool's
error text, in one place.

Scope: a server serves the project it was started for (the cwd of `recalld mcp`, or its
`--project`) as the agent identity of its environment at start (RECALLD_AGENT,
RECALLD_SUBAGENT). A tool's `cwd` may name a directory inside that project (a subdirectory,
another worktree), never another project: the agent sees an error instead. Memories and
proposals the server may not read do not exist for its tools (docs/security.md, "Scope").
"""

import contextvars
import functools
import inspect
import os
import sqlite3
from dataclasses import dataclass

from recalld import memories
from recalld.capture import decide
from recalld.core import db, scope

PROPOSAL_STATES = ("open", "pending", "edited", "approved", "rejected", "all")


@dataclass(frozen=True)
class Bound:
    """What one server may touch, fixed when it starts: `root` is where it started (relative
    `cwd` arguments are taken from there), `scope` its project and agent identity."""
    root: str
    scope: scope.Scope


def bind(root: "str | None" = None, env: "dict | None" = None) -> Bound:
    root = os.path.realpath(os.path.expanduser(root or os.getcwd()))
    return Bound(root=root, scope=scope.resolve(root, None, env))


# The server the running tool call belongs to: set by with_store around every call, so the
# tools keep their plain signatures and no tool can run without its server's scope.
_BOUND: "contextvars.ContextVar[Bound]" = contextvars.ContextVar("recalld_mcp_bound")


def _scope(cwd) -> scope.Scope:
    bound = _BOUND.get(None)
    if bound is None:
        raise memories.StoreError("no server scope: MCP tools run through build()'s wrappers")
    return scope.narrow(bound.scope, cwd, base=bound.root)


def _own_proposal(conn, proposal_id) -> dict:
    """The proposal if it belongs to the server's project; another project's is reported as
    not existing (its draft is that project's text)."""
    p = decide.get(conn, proposal_id)
    if p is None or p["project"] != _scope("").project:
        raise decide.ProposalError(f"{proposal_id} does not exist")
    return p


def _limit(n: int) -> int:
    return max(1, min(int(n), 200))


# --- memories --------------------------------------------------------------------------------


def search(conn, query: str, limit: int = 10, cwd: str = "") -> list[dict]:
    """Search current memories visible from `cwd`'s project (ranked; `score` is the 0..1
    share of the query's informative terms a memory covers)."""
    from recalld.core.search import search as run

    return [h.as_dict() for h in run(conn, query, _scope(cwd), limit=_limit(limit))]


def remember(conn, text: str, kind: str = "fact", scope_name: str = "project", tell: str = "",
             always: bool = False, supersedes: list[int] | None = None, cwd: str = "",
             thread: str = "", allow_secrets: bool = False) -> dict:
    """Commit a memory (durable before it returns). Returns every record it changed and up to
    three current memories that look related, so you can decide to supersede them. `thread`
    names the conversation or line of work it continues (search then reads it with the
    thread's previous memory). Keys, tokens and passwords in it are stored as [REDACTED:kind]
    (`redacted` gives the kinds and counts); `allow_secrets` stores them as written, and the
    memory's change log says so."""
    res = memories.remember(conn, text, _scope(cwd), scope=scope_name, kind=kind, tell=tell or None,
                         always=always, supersedes=supersedes or [], source="mcp",
                         thread=thread or None, allow_secrets=bool(allow_secrets))
    return res.as_dict()


def show(conn, memory_id: int, session: str = "") -> dict:
    """Open one memory whole: what a recalld tell line points at ("open: recalld show ID").
    Returns its text, kind, scope and state (a superseded one says so)."""
    return memories.show(conn, memory_id, _scope(""), via="mcp", session=session or None)


def history(conn, memory_id: int) -> list[dict]:
    """A memory's supersession chain with its change log (the memories this server may read)."""
    return memories.history(conn, memory_id, _scope(""))


def retract(conn, memory_id: int, why: str, cwd: str = "") -> dict:
    """Invalidate a memory that is no longer true, without a successor."""
    return memories.retract(conn, memory_id, why, _scope(cwd))


# --- proposals -------------------------------------------------------------------------------


def proposals_list(conn, cwd: str = "", session: str = "", state: str = "open", limit: int = 20) -> list[dict]:
    """Drafted memories awaiting your decision (state: open|pending|edited|approved|rejected|all)."""
    if state not in PROPOSAL_STATES:
        raise decide.ProposalError(f"unknown state {state!r}; use one of: {', '.join(PROPOSAL_STATES)}")
    states = {"open": decide.OPEN, "all": None}.get(state, (state,))
    return decide.list_(conn, project=_scope(cwd).project, session=session or None, states=states,
                           limit=_limit(limit))


def proposals_show(conn, proposal_id: str) -> dict:
    """One proposal with its draft, why, provenance and every transition."""
    return _own_proposal(conn, proposal_id)


def proposals_approve(conn, proposal_id: str, scope_name: str = "", kind: str = "",
                      supersedes: list[int] | None = None, session: str = "") -> dict:
    """Commit a drafted memory (durable before it returns). Returns every record it changed."""
    _own_proposal(conn, proposal_id)
    return decide.approve(conn, proposal_id, scope=scope_name or None, kind=kind or None,
                             supersedes=supersedes or [], actor="mcp", session=session or None).as_dict()


def proposals_edit(conn, proposal_id: str, text: str = "", kind: str = "", scope_name: str = "",
                   tell: str = "", reason: str = "", session: str = "") -> dict:
    """Change what approval will write; the proposal stays open until approved or rejected."""
    _own_proposal(conn, proposal_id)
    return decide.edit(conn, proposal_id, text=text or None, kind=kind or None, scope=scope_name or None,
                          tell=tell or None, reason=reason or None, actor="mcp",
                          session=session or None).as_dict()


def proposals_reject(conn, proposal_id: str, reason: str, session: str = "") -> dict:
    """Decline a drafted memory, with the reason."""
    _own_proposal(conn, proposal_id)
    return decide.reject(conn, proposal_id, reason, actor="mcp", session=session or None).as_dict()


TOOLS = (search, show, remember, history, retract, proposals_list, proposals_show, proposals_approve,
         proposals_edit, proposals_reject)


def with_store(fn, tool_error, bound: Bound):
    """`fn(conn, ...)` as an MCP tool of the server bound to `bound`: opens the store, maps an
    expected error to the agent's error text (`tool_error`), closes the store. The tool's
    schema is `fn`'s signature without `conn`."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]

    @functools.wraps(fn)
    def tool(*args, **kwargs):
        token = _BOUND.set(bound)
        try:
            try:
                conn = db.connect()
            except (sqlite3.Error, OSError) as e:
                raise tool_error(f"cannot open the store: {e}") from None
            try:
                return fn(conn, *args, **kwargs)
            except (db.StoreError, decide.ProposalError, scope.ScopeError) as e:
                raise tool_error(str(e)) from None
            finally:
                conn.close()
        finally:
            _BOUND.reset(token)

    tool.__signature__ = sig.replace(parameters=params)
    tool.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "conn"}
    del tool.__wrapped__  # the schema must come from __signature__, not fn's own
    return tool


def build(root: "str | None" = None, env: "dict | None" = None):
    """The MCP server for the project of `root` (default: the current directory), as the
    agent identity of `env` (default: this process's environment), both read once, here."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError  # reaches the agent as the error text

    bound = bind(root, env)
    server = MCPServer("recalld")
    for fn in TOOLS:
        server.tool()(with_store(fn, ToolError, bound))
    return server


def serve(root: "str | None" = None) -> None:
    """The SDK's server alone over stdio; `recalld mcp` is recalld/mcp/stdio.py, which answers
    the first lines itself while this loads, then relays to it."""
    build(root).run()
