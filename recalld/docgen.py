"""Generate docs/cli.md from the click command tree, so the reference cannot drift.

    python3 -m recalld.docgen          # rewrite docs/cli.md
    tests/test_docs.py checks that the committed file matches the code.
"""

import os
import sys

import click

HEADER = """# Command reference

Generated from the code by `python3 -m recalld.docgen`; `tests/test_docs.py` fails when it
is out of date. Do not edit by hand.
"""


def _walk(cmd: click.Command, path: list, ctx_parent=None):
    ctx = click.Context(cmd, info_name=path[-1], parent=ctx_parent)
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            yield from _walk(cmd.get_command(ctx, name), path + [name], ctx)


def render() -> str:
    from recalld.cli import cli

    out = [HEADER]
    for path, cmd, ctx in _walk(cli, ["recalld"]):
        if cmd.hidden:
            continue
        out.append(f"\n## `{' '.join(path)}`\n")
        help_text = cmd.get_help(ctx)
        # the terminal width must not change the file
        out.append("```\n" + help_text.rstrip() + "\n```\n")
    return "".join(out)


def target() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "cli.md")


def main() -> None:
    os.environ["COLUMNS"] = "100"
    text = render()
    with open(target(), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {target()} ({text.count('## ')} commands)", file=sys.stderr)


if __name__ == "__main__":
    main()
