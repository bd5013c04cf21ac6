"""Generate the parts of the docs that the code knows, so they cannot drift.

    python3 -m recalld.cli.docgen      # rewrite docs/cli.md, docs/settings.md and architecture.md's module list
    tests/test_docs.py checks that the committed files match the code.

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
    cell = f"{help_text}{_default(p)}{extra}"
    # a Choice's "a|b" would split the markdown row
    return f"| {names} | {tname.replace('|', chr(92) + '|')} | {cell.replace('|', chr(92) + '|')} |"


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


SETTINGS_HEADER = """# Settings

Generated from the code (recalld/core/settings.py, recalld/cli/settings_doc.py) by `python3 -m
recalld.cli.docgen`; `tests/test_docs.py` fails when it is out of date. Do not edit by hand.

Settings live in `RECALLD_HOME/settings.json`, which holds only what you changed:
`recalld config set KEY VALUE` checks a value against its type and range before writing it,
`recalld config show` prints every setting in effect, `recalld config keys` this table. A value
that is not valid when read (the file edited by hand) falls back to its default, and the
receipt of the hook that read it says which (`detail.settings_fallback`).
"""


def _cell(v) -> str:
    return str(v).replace("|", chr(92) + "|")


def render_settings() -> str:
    import json

    from recalld.cli import settings_doc

    out = [SETTINGS_HEADER, "\n| setting | takes | default | meaning |\n|---|---|---|---|\n"]
    for k in settings_doc.keys():
        out.append(f"| `{k['key']}` | {_cell(k['type'])} | `{_cell(json.dumps(k['default']))}` | {_cell(k['meaning'])} |\n")
    out.append("\n## Environment\n\n| variable | meaning |\n|---|---|\n")
    for name, meaning in settings_doc.ENVIRONMENT.items():
        out.append(f"| `{name}` | {_cell(meaning)} |\n")
    return "".join(out)


def settings_target() -> str:
    return os.path.join(_root(), "docs", "settings.md")


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def target() -> str:
    return os.path.join(_root(), "docs", "cli.md")


def architecture_path() -> str:
    return os.path.join(_root(), "docs", "architecture.md")


MODULES_BEGIN = "<!-- modules: generated by `python3 -m recalld.cli.docgen` -->"
MODULES_END = "<!-- /modules -->"


def module_table() -> str:
    """One row per module of the package: its path and the first line of its docstring."""
    import ast

    import recalld

    pkg = os.path.dirname(os.path.abspath(recalld.__file__))
    rows = ["| module | what it is |", "|---|---|"]
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("__"))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            with open(path, encoding="utf-8") as f:
                doc = ast.get_docstring(ast.parse(f.read())) or ""
            para = " ".join(doc.strip().split("\n\n")[0].split())
            first = para.split(". ")[0].rstrip(".") + "." if para else ""
            rel = os.path.relpath(path, os.path.dirname(pkg))
            rows.append(f"| `{rel}` | {first.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


def render_architecture(current: str) -> str:
    """architecture.md with its module list replaced by the current one."""
    head, sep, rest = current.partition(MODULES_BEGIN)
    if not sep:
        raise ValueError(f"{architecture_path()} has no {MODULES_BEGIN!r} marker")
    _old, sep2, tail = rest.partition(MODULES_END)
    if not sep2:
        raise ValueError(f"{architecture_path()} has no {MODULES_END!r} marker")
    return f"{head}{MODULES_BEGIN}\n{module_table()}\n{MODULES_END}{tail}"


def main() -> None:
    text = render()
    with open(target(), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {target()} ({text.count(chr(10) + '## ')} commands)", file=sys.stderr)
    with open(settings_target(), "w", encoding="utf-8") as f:
        f.write(render_settings())
    print(f"wrote {settings_target()}", file=sys.stderr)
    with open(architecture_path(), encoding="utf-8") as f:
        arch = f.read()
    if MODULES_BEGIN in arch:
        with open(architecture_path(), "w", encoding="utf-8") as f:
            f.write(render_architecture(arch))
        print(f"wrote {architecture_path()} (module list)", file=sys.stderr)


if __name__ == "__main__":
    main()
