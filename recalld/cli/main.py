"""The command line: a thin layer over the library modules.

Errors are one clear line on stderr and a non-zero exit. `--json` output is for agents and
scripts. This module holds the group and the memory commands; the daemon, models, proposals,
crystals, install and bench commands live in their own modules of this package, each with
`register(cli)`, and are wired by the explicit COMMAND_MODULES list at the bottom.
"""

import errno
import json
import os
import sqlite3
import sys

import click

from recalld import __version__, memories
from recalld.cli.common import Fail, echo_json, explain, fmt_memory, open_db, resolve_scope
from recalld.core import db, paths, receipts, scope


class _Group(click.Group):
    """Turns a store or file-system failure anywhere in a command into the one-line Fail (the
    specific cases are worded in common.explain); a broken pipe stays click's."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except sqlite3.Error as e:
            raise Fail(explain(e)) from None
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise
            raise Fail(explain(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="recalld")
def cli():
    """recalld: involuntary recall for coding agents.

    State lives under RECALLD_HOME (default: ~/.local/share/recalld).
    """


@cli.command()
@click.argument("text")
@click.option("--scope", "scope_name", type=click.Choice(["agent", "project", "shared"]), default="project", show_default=True)
@click.option("--kind", type=click.Choice(list(memories.KINDS)), default="fact", show_default=True)
@click.option("--tell", help="One line that carries the claim when the text cannot fit.")
@click.option("--always", is_flag=True, help="Inject at every session start (house style, preferences).")
@click.option("--supersedes", multiple=True, help="Memory id this replaces (repeatable).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Resolve the project from here (default: current directory).")
@click.option("--session", help="Session id, for provenance.")
@click.option("--thread", help="The conversation or line of work this continues: search reads it with the "
              "thread's previous memory.")
@click.option("--allow-secrets", is_flag=True, help="Store keys, tokens and passwords as written instead of "
              "[REDACTED:kind] (recorded in the memory's change log).")
@click.option("--json", "as_json", is_flag=True)
def remember(text, scope_name, kind, tell, always, supersedes, cwd, session, thread, allow_secrets, as_json):
    """Commit a memory. Returns once it is on disk and prints every record it changed. Secrets
    in it are redacted unless --allow-secrets."""
    conn = open_db()
    try:
        res = memories.remember(conn, text, resolve_scope(cwd), scope=scope_name, kind=kind, tell=tell,
                             always=always, supersedes=supersedes, session=session, thread=thread,
                             allow_secrets=allow_secrets)
    except memories.StoreError as e:
        raise Fail(str(e))
    if as_json:
        echo_json(res.as_dict())
        return
    click.echo(f"remembered {fmt_memory(res.memory)}")
    _echo_secrets(res.redacted, res.secrets_kept)
    for m in res.superseded:
        click.echo(f"superseded {fmt_memory(m)}")
    if res.similar:
        click.echo("\nThese current memories look related; supersede any that this replaces (nothing was changed):")
        for s in res.similar:
            click.echo(f"  m{s['id']} ({s['relation']}, similarity {s['similarity']}): {s['text'][:160]}")


@cli.command()
@click.argument("query")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 200))
@click.option("--cwd", type=click.Path(file_okay=False))
@click.option("--floor", type=float, default=0.0, show_default=True, help="Minimum coverage score (0..1).")
@click.option("--json", "as_json", is_flag=True)
def search(query, limit, cwd, floor, as_json):
    """Search current memories this project and agent may see."""
    from recalld.core.search import search as run_search

    conn = open_db(reading=True)
    hits = run_search(conn, query, resolve_scope(cwd), limit=limit, floor=floor)
    if as_json:
        echo_json([h.as_dict() for h in hits])
        return
    if not hits:
        click.echo("no matching memories")
        return
    for h in hits:
        click.echo(f"m{h.id} score={h.score:.2f} [{h.kind}, {h.scope}] {h.text}")


@cli.command()
@click.argument("memory_id")
@click.option("--cwd", type=click.Path(file_okay=False), help="Read as this project (default: current directory).")
@click.option("--session", help="The agent session that opens it, for the receipt.")
@click.option("--json", "as_json", is_flag=True)
def show(memory_id, cwd, session, as_json):
    """Open one memory whole (a tell's `recalld show ID`): its text, kind, scope and state.
    The open is receipted, so `recalld receipts` shows which tells were opened."""
    conn = open_db()
    try:
        m = memories.show(conn, memory_id, resolve_scope(cwd), via="cli", session=session)
    except memories.StoreError as e:
        raise Fail(str(e))
    if as_json:
        echo_json(m)
        return
    click.echo(fmt_memory(m))


@cli.command()
@click.argument("memory_id")
@click.option("--cwd", type=click.Path(file_okay=False), help="Read as this project (default: current directory).")
@click.option("--json", "as_json", is_flag=True)
def history(memory_id, cwd, as_json):
    """Show a memory's supersession chain and every change to it (the memories this project
    and agent may read)."""
    conn = open_db(reading=True)
    try:
        chain = memories.history(conn, memory_id, resolve_scope(cwd))
    except memories.StoreError as e:
        raise Fail(str(e))
    if as_json:
        echo_json(chain)
        return
    for m in chain:
        click.echo(fmt_memory(m))
        for c in m["changes"]:
            other = f" m{c['other_id']}" if c["other_id"] else ""
            reason = f": {c['reason']}" if c["reason"] else ""
            click.echo(f"    {c['time']} {c['action']}{other}{reason}")


@cli.command()
@click.argument("memory_id")
@click.option("--why", required=True, help="Why it is no longer true.")
@click.option("--cwd", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def retract(memory_id, why, cwd, as_json):
    """Invalidate a memory without a successor (it is kept, marked, never injected)."""
    conn = open_db()
    try:
        m = memories.retract(conn, memory_id, why, resolve_scope(cwd))
    except memories.StoreError as e:
        raise Fail(str(e))
    if as_json:
        echo_json({"changed": [m]})
    else:
        click.echo(f"retracted {fmt_memory(m)}")


def _sum_counts(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, n in d.items():
            out[k] = out.get(k, 0) + n
    return out


def _echo_secrets(redacted: dict, kept: dict) -> None:
    """Say what was redacted or kept: kinds and counts, never the values."""
    if redacted:
        click.echo(f"redacted before storing: {memories.describe_secrets(redacted)} "
                   "(stored as [REDACTED:kind]; --allow-secrets keeps them)")
    if kept:
        click.echo(f"secrets stored as written (--allow-secrets, in the change log): {memories.describe_secrets(kept)}")


@cli.command(name="import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--cwd", type=click.Path(file_okay=False), help="Default project for lines without a cwd.")
@click.option("--allow-secrets", is_flag=True, help="Store keys, tokens and passwords as written instead of "
              "[REDACTED:kind] (recorded in each memory's change log).")
@click.option("--json", "as_json", is_flag=True)
def import_(file, cwd, allow_secrets, as_json):
    """Bulk-load memories from JSONL (the fields of `remember`). All or nothing. Secrets are
    redacted unless --allow-secrets."""
    conn = open_db()
    try:
        results = memories.import_jsonl(conn, file, resolve_scope(cwd), allow_secrets=allow_secrets)
    except memories.StoreError as e:
        raise Fail(f"nothing imported: {e}")
    if as_json:
        echo_json([{"id": r.memory["id"], "superseded": [m["id"] for m in r.superseded], "redacted": r.redacted,
                    "secrets_kept": r.secrets_kept} for r in results])
    else:
        click.echo(f"imported {len(results)} memories (m{results[0].memory['id']}..m{results[-1].memory['id']})"
                   if results else "imported 0 memories")
        _echo_secrets(_sum_counts(r.redacted for r in results), _sum_counts(r.secrets_kept for r in results))


@cli.command(name="receipts")
@click.option("--json", "as_json", is_flag=True)
@click.option("--summary", is_flag=True, help="Per hook: runs, outcome shares, p50/p99 duration.")
@click.option("--session")
@click.option("--hook")
@click.option("--source", type=click.Choice(["hook", "daemon", "proposer", "cli", "mcp", "team"]))
@click.option("--limit", type=int, default=None)
def receipts_cmd(as_json, summary, session, hook, source, limit):
    """What every hook run and background pass did: delivered, cut, withheld, failed."""
    conn = None
    if os.path.exists(paths.db_path()):
        try:
            conn = open_db(readonly=True)  # a store that cannot be written is still read
            conn.execute("SELECT 1 FROM receipts LIMIT 1")
        except (Fail, sqlite3.Error) as e:
            click.echo(f"recalld: database unreadable ({getattr(e, 'message', e)}); showing fallback receipts only",
                       err=True)
            conn = None
    recs = receipts.read(conn, session=session, hook=hook, source=source,
                         limit=None if summary else (limit or (None if as_json else 20)))
    receipts.mark_opened(conn, recs)
    if summary:
        data = receipts.summary(recs[:limit] if limit else recs)
        if as_json:
            echo_json(data)
            return
        click.echo(f"{'source':8} {'hook':14} {'runs':>6} {'p50 ms':>8} {'p99 ms':>8}  outcomes")
        for s in data:
            shares = ", ".join(f"{k} {v:.0%}" for k, v in s["outcomes"].items())
            p50 = f"{s['p50_ms']:.1f}" if s["p50_ms"] is not None else "-"
            p99 = f"{s['p99_ms']:.1f}" if s["p99_ms"] is not None else "-"
            told = f"; told {s['told']}, opened {s['opened']}" if s.get("told") else ""
            click.echo(f"{s['source'] or '-':8} {s['hook'] or '-':14} {s['runs']:>6} {p50:>8} {p99:>8}  {shares}{told}")
        return
    if as_json:
        echo_json(recs)
        return
    if not recs:
        asked = [f"--{k} {v}" for k, v in (("session", session), ("hook", hook), ("source", source)) if v]
        click.echo(f"no receipts match {' '.join(asked)}" if asked else "no receipts yet")
        return
    click.echo(f"{'time':19} {'source':7} {'hook':13} {'act':11} {'outcome':8} {'ms':>7} {'cand':>4} {'del':>3} {'cut':>3} {'wh':>3}  ids / error")
    for r in reversed(recs):
        ids = ",".join(r.get("delivered_ids") or [])
        told = (r.get("detail") or {}).get("told")
        if told:  # shown as tells; `opened`: opened since (recalld show, the MCP tool show)
            opened = set(r.get("opened") or ())
            ids = (ids + " " if ids else "") + "told " + ",".join(k + (" (opened)" if k in opened else "")
                                                                  for k in told)
        tail = r.get("error") or ids
        dur = r.get("duration_ms")
        click.echo(f"{(r.get('time') or '')[:19]:19} {r.get('source') or '':7} {r.get('hook') or '':13} "
                   f"{r.get('act') or '':11} {r.get('outcome') or '':8} {(f'{dur:.1f}' if dur is not None else '-'):>7} "
                   f"{r.get('candidates') or 0:>4} {r.get('delivered') or 0:>3} {r.get('cut') or 0:>3} "
                   f"{r.get('withheld') or 0:>3}  {tail}")


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("event")
@click.option("--agent", type=click.Choice(["claude", "claude-code", "codex", "gemini", "git"]))
@click.option("--deadline-ms", type=int)
def hook(event, agent, deadline_ms):
    """Run one hook (reads the agent's JSON on stdin). Normally called by the agent."""
    from recalld.hook.served import launch

    argv = [event] + (["--agent", agent] if agent else []) + (["--deadline-ms", str(deadline_ms)] if deadline_ms else [])
    launch(argv)


@cli.command()
@click.option("--project", "--cwd", "root", type=click.Path(exists=True, file_okay=False),
              help="The project to serve (default: the current directory at start). Tools may name a cwd "
              "inside it, never another project.")
def mcp(root):
    """Serve search, remember, history, retract (and more) as MCP tools over stdio."""
    from recalld.mcp.stdio import serve  # ready for tools/list before the mcp SDK has loaded

    serve(root)


@cli.group()
def config():
    """Show or change settings (RECALLD_HOME/settings.json)."""


@config.command("show")
def config_show():
    from recalld.core import settings

    fell_back: list = []
    cfg = settings.load(fell_back)
    for key in fell_back:  # stderr, so the JSON on stdout stays parseable
        if key == "settings.json":
            click.echo(f"recalld: {paths.settings_path()} is not a readable JSON object; using the defaults", err=True)
        elif key == "RECALLD_DEADLINE_MS":
            click.echo(f"recalld: RECALLD_DEADLINE_MS is not {settings.expected('deadline_ms', 0)}; ignored", err=True)
        else:
            click.echo(f"recalld: {key} in settings.json is not valid; using the default", err=True)
    echo_json(cfg)


@config.command("keys")
@click.option("--json", "as_json", is_flag=True, help="One object per setting: key, type, default, meaning.")
def config_keys(as_json):
    """Every setting: what it takes, its default and what it does (docs/settings.md)."""
    from recalld.cli import settings_doc

    rows = settings_doc.keys()
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['key']} = {json.dumps(r['default'])}  ({r['type']})")
        click.echo(f"    {r['meaning']}")


@config.command("set")
@click.argument("key")
@click.argument("value")
def config_set(key, value):
    """Set KEY (dotted, e.g. judge.threshold) to VALUE (parsed as JSON when it parses). A value
    of the wrong type or out of range is refused, naming what KEY takes."""
    from recalld.core import settings

    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    parsed, err = settings.check(key, parsed)
    if err:
        raise Fail(f"not set: {err}")
    over = settings.load_overrides()
    node = over
    parts = key.split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = parsed
    settings.save(over)
    click.echo(f"{key} = {json.dumps(parsed)}")


# Every command module, listed where it is wired (no discovery by scanning).
from recalld.cli import bench, crystals, daemon, demo, embed, export, install, judge, models, proposals, team  # noqa: E402

COMMAND_MODULES = (bench, crystals, daemon, demo, embed, export, install, judge, models, proposals, team)
for _mod in COMMAND_MODULES:
    _mod.register(cli)
