"""Generate docs/cli.md from the click command tree, so the reference cannot drift.

    python3 -m recalld.cli.docgen      # rewrite docs/cli.md
    tests/test_docs.py checks that the committed file matches the code.

The page is rendered here from the commands' own parameters and docstrings, not from click's
help formatter: click changes its help layout between patch releases (8.4.1 -> 8.4.2 did), and
the reference must only change when the commands do.
"""

import inspect
import os
import sys

import click

HEADER = """# Command reference

Generated from the code by `python3 -m recalld.cli.docgen`; `tests/test_docs.py` fails when it
is out of date. Do not edit by hand.
"""


def _walk(cmd: click.Command, path: list, ctx_parent=None):
    ctx = click.Context(cmd, info_name=path[-1], parent=ctx_parent)
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            yield from _walk(cmd.get_command(ctx, name), path + [name], ctx)


def _type_name(p: click.Parameter) -> str:
    t = p.type
    if isinstance(t, click.Choice):
        return "|".join(str(c) for c in t.choices)
    if isinstance(p, click.Option) and p.is_flag:
        return ""
    return t.name.upper()


def _usage(path: list, cmd: click.Command) -> str:
    parts = [" ".join(path)]
    if any(isinstance(p, click.Option) for p in cmd.params) or cmd.params == []:
        parts.append("[OPTIONS]")
    for p in cmd.params:
        if isinstance(p, click.Argument):
            name = p.name.upper() + ("..." if p.nargs == -1 else "")
            parts.append(name if p.required else f"[{name}]")
    if isinstance(cmd, click.Group):
        parts.append("COMMAND [ARGS]...")
    return " ".join(parts)


def _default(p: click.Option) -> str:
    if not p.show_default or p.is_flag or p.default is None or callable(p.default):
        return ""
    d = p.default
    if isinstance(d, (list, tuple)):
        if not d:
            return ""
        d = ", ".join(str(x) for x in d)
    return f" (default: `{d}`)"


def _option_row(p: click.Option) -> str:
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    tname = _type_name(p)
    flags = []
    if p.required:
        flags.append("required")
    if p.multiple:
        flags.append("repeatable")
    help_text = " ".join((p.help or "").split())
    extra = f" [{', '.join(flags)}]" if flags else ""
    return f"| {names} | {tname} | {help_text}{_default(p)}{extra} |"


def render_command(path: list, cmd: click.Command) -> str:
    out = [f"\n## `{' '.join(path)}`\n", f"\n```\n{_usage(path, cmd)}\n```\n"]
    doc = inspect.cleandoc(cmd.help or "").split("\f")[0].strip()
    if doc:
        out.append("\n" + doc + "\n")
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if opts:
        out.append("\n| option | type | meaning |\n|---|---|---|\n")
        out.append("\n".join(_option_row(p) for p in opts) + "\n")
    if isinstance(cmd, click.Group):
        subs = [n for n in sorted(cmd.commands) if not cmd.commands[n].hidden]
        if subs:
            out.append("\nCommands: " + ", ".join(f"`{n}`" for n in subs) + ".\n")
    return "".join(out)


def render() -> str:
    from recalld.cli.main import cli

    out = [HEADER]
    for path, cmd, _ctx in _walk(cli, ["recalld"]):
        if cmd.hidden:
            continue
        out.append(render_command(path, cmd))
    return "".join(out)


def target() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "docs", "cli.md")


def main() -> None:
    text = render()
    with open(target(), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {target()} ({text.count(chr(10) + '## ')} commands)", file=sys.stderr)


if __name__ == "__main__":
    main()
