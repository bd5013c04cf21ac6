"""Console entry point.

`recalld hook ...` runs on every prompt and tool call, so it is dispatched before anything
outside the standard library is imported; everything else goes to the click CLI.
"""

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from recalld.hook.served import launch

        launch(argv[1:])
    if argv[:1] == ["mcp"]:
        # An agent waits for tools/list at startup: answered before click or the SDK load
        # (recalld/mcp/stdio.py); anything it does not parse goes on to the click command.
        from recalld.mcp.stdio import main as mcp_main

        rc = mcp_main(argv[1:])
        if rc >= 0:
            sys.exit(rc)
    import sqlite3  # here, not at the top: the hook and the MCP server above never need it this early

    try:
        from recalld.cli.main import cli

        cli(prog_name="recalld")
    except (OSError, sqlite3.Error) as e:
        # The last resort (the click group words what fails inside a command): one line, no traceback.
        try:
            from recalld.cli.common import explain

            line = explain(e)
        except Exception:
            line = f"{type(e).__name__}: {e}"
        sys.stderr.write(f"recalld: {line}\n")
        sys.exit(1)
