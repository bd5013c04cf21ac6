"""`recalld mcp`: the agent-facing tools over MCP stdio (mcp 2.x, MCPServer).

The tools call the same library functions as the CLI. Modules in recalld/commands/ may add
tools by defining `register_mcp(server)`.
"""

import importlib
import pkgutil

from recalld import db, scope, store


def _scope(cwd):
    return scope.resolve(cwd or None)


def build():
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError  # reaches the agent as the error text

    server = MCPServer("recalld")

    @server.tool()
    def search(query: str, limit: int = 10, cwd: str = "") -> list[dict]:
        """Search current memories visible from `cwd`'s project (ranked; `score` is the 0..1
        share of the query's informative terms a memory covers)."""
        from recalld.search import search as run

        conn = db.connect()
        try:
            return [h.as_dict() for h in run(conn, query, _scope(cwd), limit=max(1, min(limit, 200)))]
        finally:
            conn.close()

    @server.tool()
    def remember(text: str, kind: str = "fact", scope_name: str = "project", tell: str = "",
                 always: bool = False, supersedes: list[int] | None = None, cwd: str = "",
                 thread: str = "") -> dict:
        """Commit a memory (durable before it returns). Returns every record it changed and up to
        three current memories that look related, so you can decide to supersede them. `thread`
        names the conversation or line of work it continues (search then reads it with the
        thread's previous memory)."""
        conn = db.connect()
        try:
            res = store.remember(conn, text, _scope(cwd), scope=scope_name, kind=kind, tell=tell or None,
                                 always=always, supersedes=supersedes or [], source="mcp",
                                 thread=thread or None)
            return {"id": res.memory["id"], "superseded": [m["id"] for m in res.superseded],
                    "changed": [res.memory, *res.superseded], "similar": res.similar}
        except store.MemoryError_ as e:
            raise ToolError(str(e)) from None
        finally:
            conn.close()

    @server.tool()
    def history(memory_id: int) -> list[dict]:
        """A memory's supersession chain with its change log."""
        conn = db.connect()
        try:
            return store.history(conn, memory_id)
        except store.MemoryError_ as e:
            raise ToolError(str(e)) from None
        finally:
            conn.close()

    @server.tool()
    def retract(memory_id: int, why: str, cwd: str = "") -> dict:
        """Invalidate a memory that is no longer true, without a successor."""
        conn = db.connect()
        try:
            return store.retract(conn, memory_id, why, _scope(cwd), )
        except store.MemoryError_ as e:
            raise ToolError(str(e)) from None
        finally:
            conn.close()

    import recalld.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        mod = importlib.import_module(f"recalld.commands.{info.name}")
        reg = getattr(mod, "register_mcp", None)
        if reg is not None:
            reg(server)
    return server


def serve() -> None:
    build().run()
