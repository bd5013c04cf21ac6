"""`recalld crystals list|show|test|lint|stats|trust|untrust`: inspect, dry-run, admit,
measure and trust crystals.

The library work lives in recalld.crystals (parsing, trust, administration),
recalld.hook.crystal_source and recalld.core.packer; this module only reads (the store read-only, receipts, crystal files),
except `trust`/`untrust`, which append to the trust log. Essences are printed through
untrusted.as_data, as the hook delivers them: an agent may be the one reading this output.
"""

import json
import os
from datetime import datetime, timezone

import click

from recalld import crystals
from recalld.core import untrusted, packer, paths, receipts, scope, settings
from recalld.crystals import admin, trust
from recalld.crystals.admin import stats  # the `stats` command's figures (also the benchmark's)
from recalld.hook import crystal_source, payloads

SHORT_KEY = 3


def _project(cwd) -> str:
    return scope.resolve_project(cwd)


def _index(cwd) -> crystals.Index:
    return crystals.load_for(_project(cwd))


def _readonly_conn():
    import sqlite3

    from recalld.core import db

    if not os.path.exists(paths.db_path()):
        return None
    try:
        c = db.connect(readonly=True)
        c.execute("SELECT 1 FROM served LIMIT 1")
        return c
    except sqlite3.Error:
        return None


# --- dry run --------------------------------------------------------------------------------


def dry_run(act: str, text: str, cwd: "str | None" = None, session: "str | None" = None,
            cfg: "dict | None" = None, conn=None) -> dict:
    """What the hook would match and deliver for this act (crystals only), recording nothing."""
    from recalld.hook.run import budget_for

    cfg = cfg or settings.load()
    project = _project(cwd)
    hi = payloads.HookInput(event="dry-run", agent_kind="claude", native_event=None, session=session,
                            cwd=cwd, act=act, text=text[:payloads.MAX_ACT_TEXT])
    index = crystals.load_for(project)
    items, detail = crystal_source.candidates(index, hi, conn, project)
    budget = budget_for(hi, cfg)
    packed = packer.pack(items, budget, int(cfg["item_cap_chars"]))
    return {"act": act, "project": project, "budget": budget, "cap": int(cfg["item_cap_chars"]),
            "crystals": detail, "accounting": packed.accounting(), "text": packed.text(),
            "placed": [{"id": p.item.key[2:], "keys": p.item.meta.get("keys", []), "outcome": p.outcome,
                        "delivered_chars": len(p.text) + 1 if p.text else 0, "cut_chars": p.cut_chars,
                        "cut_claims": p.cut_claims, "wanted_chars": p.wanted_chars}
                       for p in packed.placed]}


# --- lint -----------------------------------------------------------------------------------


def _problem(level, code, message, c=None, path=None) -> dict:
    return {"level": level, "code": code, "id": c.id if c else (crystals.crystal_id(path) if path else None),
            "path": c.path if c else path, "message": message}


def _mtime_iso(path: str) -> str:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime, timezone.utc).isoformat(timespec="microseconds")
    except OSError:
        return ""


def _shell(path: str) -> str:
    import shlex

    return shlex.quote(path)


def key_shares(index: crystals.Index, recs: list) -> dict:
    """{(crystal id, key): (acts where the key matched, acts of the crystal's kinds)} over the
    receipts since the crystal file last changed. Receipts keep which crystal keys matched
    (keys come from the crystal files), never the act's text, so this stays payload-free."""
    out = {}
    for c in index.crystals + index.untrusted_crystals:
        since = _mtime_iso(c.path)
        window = [r for r in recs if r.get("act") in c.on and (r.get("time") or "") >= since
                  and isinstance((r.get("detail") or {}).get("crystals"), dict)]
        for k in c.match:
            hit = sum(1 for r in window if k in (r["detail"]["crystals"].get("hits") or {}).get(c.id, []))
            out[(c.id, k)] = (hit, len(window))
    return out


def lint(index: crystals.Index, cfg: dict, recs: "list | None" = None, share: float = 0.25,
         min_acts: int = 20) -> list:
    cap = int(cfg["item_cap_chars"])
    probs = []
    for f in index.failures:
        code = f.code if f.code in ("oversize", "symlink") else "unparseable"
        probs.append(_problem("error", code, f"skipped by the hook: {f.reason}", path=f.path))
    for d, st in sorted(index.trust.items()):
        if st != "trusted":
            probs.append({"level": "warning", "code": "untrusted", "id": None, "path": d,
                          "message": f"{d} {'changed since it was trusted' if st == 'changed' else 'is not trusted'}: "
                                     "the hook delivers none of this folder's crystals until "
                                     f"`recalld crystals trust {_shell(os.path.dirname(os.path.dirname(d)))}`"})
    seen_keys: dict = {}
    shares = key_shares(index, recs or [])
    for c in index.crystals + index.untrusted_crystals:
        for k in c.match:
            if len(k.strip()) < SHORT_KEY:
                probs.append(_problem("error", "short_key", f"key {k!r} is shorter than {SHORT_KEY} chars: "
                                      "it matches nearly every act and wins the auction for nobody", c))
            hit, n = shares.get((c.id, k), (0, 0))
            if n >= min_acts and hit / n > share:
                probs.append(_problem("warning", "common_key", f"key {k!r} matched {hit} of the last {n} "
                                      f"{'/'.join(c.on)} acts ({hit / n:.0%}): too loose a key", c))
            for a in c.on:
                seen_keys.setdefault((a, k.lower()), []).append(c.id)
        if c.claims > 1:
            probs.append(_problem("warning", "many_claims", f"{c.claims} marked claims in one essence: one knowing "
                                  "per crystal (a second claim sits in the tail that a cut drops); split it", c))
        if not c.tell:
            probs.append(_problem("warning", "no_tell", "no `tell:`: when the essence cannot fit, it is withheld "
                                  "instead of degrading to one line", c))
        if c.is_stale():
            probs.append(_problem("warning", "stale", f"stale since {c.stale_after}: withheld on every act", c))
        body = crystals.essence(c) or ""
        full = packer.Item(c.key, "crystal", f"crystal {c.id}", body).render()
        if len(full) > cap:
            _, cut_chars, lost = packer.cut(full, cap)
            probs.append(_problem("warning", "over_cap", f"essence renders to {len(full)} chars, over the "
                                  f"{cap}-char cap: {cut_chars} chars and {lost} marked claim(s) are cut "
                                  "unless it alone wins the act", c))
        for name in c.unknown:
            probs.append(_problem("warning", "unknown_field", f"unknown binding field `{name}:` (ignored)", c))
    for (act, key), ids in sorted(seen_keys.items()):
        if len(ids) > 1:
            probs.append({"level": "warning", "code": "duplicate_key", "id": ",".join(ids), "path": None,
                          "message": f"key {key!r} on {act} is bound by {len(ids)} crystals ({', '.join(ids)}): "
                                     "each match makes them compete for the same act"})
    for c in index.shadowed:
        probs.append(_problem("warning", "shadowed", "a project crystal with the same id hides this user-wide one", c))
    return probs


def _hook_receipts(project: "str | None") -> list:
    conn = _readonly_conn()
    recs = receipts.read(conn, source="hook")
    if conn is not None:
        conn.close()
    if project:
        recs = [r for r in recs if r.get("project") == project]
    return recs


# --- trust ----------------------------------------------------------------------------------


def trust_line(summary: dict) -> str:
    """One line for `crystals list` and `doctor` about a project crystal folder not trusted."""
    if summary.get("reason"):
        return f"SKIPPED {summary['dir']}: {summary['reason']}"
    if summary["state"] == "changed":
        d = summary["diff"] or {}
        parts = [f"{k} {', '.join(d[k])}" for k in ("added", "removed", "changed") if d.get(k)]
        what = f"changed since you trusted it at {summary['trusted_at']} ({'; '.join(parts) or 'contents'})"
    else:
        what = "not trusted"
    return (f"UNTRUSTED {summary['dir']}: {what}; its {summary['crystals']} crystal(s) are not delivered. "
            f"Read them (`recalld crystals show ID`), then `{summary['command']}`")


def refuse_in_agent_shell(command: str) -> None:
    """A cloned repository's crystals are withheld until the user trusts them; an agent that
    runs `recalld crystals trust` itself (to make a held command pass, say) is not the user.
    This stops an agent granting trust in passing; it is not a sandbox (an agent that can write
    RECALLD_HOME can write anything there)."""
    from recalld import agents
    from recalld.cli.common import Fail

    owner = agents.shell_owner(os.environ)
    if owner:
        adapter, var = owner
        raise Fail(f"`recalld {command}` must come from you, not from an agent: this shell is "
                   f"{adapter.install_name or adapter.name}'s ({var} is set). Read the crystals "
                   f"(`recalld crystals list`, `show ID`) and run it in your own terminal.")


def trust_folder(cwd: "str | None") -> dict:
    """Record the project's crystal folder as trusted with the sha256 of each file, read now
    (not from the hook's cache), so what is trusted is what the user just listed."""
    from recalld.cli.common import Fail

    project = _project(cwd)
    try:
        rec, entries, failures = admin.trust_project(project)
    except ValueError as e:
        raise Fail(str(e)) from None
    return {"dir": rec["dir"], "project": project, "time": rec["time"], "files": rec["files"],
            "crystals": [{"id": d["id"], "on": list(d["on"]), "match": list(d["match"])} for _, _, d in entries],
            "failures": [{"path": f.path, "reason": f.reason, "code": f.code} for f in failures]}


# --- CLI ------------------------------------------------------------------------------------


def register(cli):
    from recalld.cli.common import Fail, echo_json

    @cli.group(name="crystals")
    def group():
        """Notes bound to acts (files in .recalld/crystals/ and RECALLD_HOME/crystals/)."""

    cwd_opt = click.option("--cwd", type=click.Path(file_okay=False), help="Project directory (default: current).")
    json_opt = click.option("--json", "as_json", is_flag=True)

    @group.command(name="list")
    @cwd_opt
    @json_opt
    def list_cmd(cwd, as_json):
        """Every crystal this project sees, and files that do not parse."""
        project = _project(cwd)
        index = crystals.load_for(project)
        summary = admin.trust_summary(project)
        today = datetime.now().date()
        rows = [{"id": c.id, "origin": c.origin, "on": list(c.on), "match": list(c.match), "tell": c.tell,
                 "stale_after": c.stale_after, "stale": c.is_stale(today), "essence_chars": c.essence_chars,
                 "claims": c.claims, "path": c.path, "trusted": trusted}
                for cs, trusted in ((index.crystals, True), (index.untrusted_crystals, False)) for c in cs]
        fails = [{"path": f.path, "reason": f.reason, "code": f.code} for f in index.failures]
        if as_json:
            echo_json({"crystals": rows, "failures": fails, "trust": summary})
            return
        if not rows and not fails:
            dirs = ", ".join(d for _, d in crystals.directories(project))
            click.echo(f"no crystals (looked in {dirs})")
            return
        for r in rows:
            flags = ((" STALE" if r["stale"] else "") + ("" if r["tell"] else " no-tell")
                     + ("" if r["trusted"] else " UNTRUSTED"))
            click.echo(untrusted.as_data(f"{r['id']:32} {r['origin']:7} on={','.join(r['on']):16} {r['essence_chars']:>5} "
                                     f"chars {r['claims']} claim(s){flags}  match: {', '.join(r['match'])}"))
        for f in fails:
            click.echo(f"{'UNPARSEABLE' if f['code'] == 'unparseable' else 'SKIPPED'} {f['path']}: {f['reason']}")
        if summary and summary["state"] != "trusted":
            click.echo(trust_line(summary))

    @group.command(name="show")
    @click.argument("crystal_id")
    @cwd_opt
    @json_opt
    def show_cmd(crystal_id, cwd, as_json):
        """One crystal: binding, and the essence exactly as delivered."""
        index = _index(cwd)
        c = index.get(crystal_id)
        trusted = c is not None
        if c is None:
            c = next((u for u in index.untrusted_crystals if u.id == crystal_id), None)
        if c is None:
            for f in index.failures:
                if f.id == crystal_id:
                    raise Fail(f"crystal {crystal_id!r} does not parse ({f.path}): {f.reason}")
            raise Fail(f"no crystal {crystal_id!r} (see `recalld crystals list`)")
        raw = crystals.essence(c)
        body = untrusted.as_data(raw) if raw is not None else None
        if as_json:
            echo_json({"id": c.id, "origin": c.origin, "path": c.path, "on": list(c.on), "match": list(c.match),
                       "tell": untrusted.as_data(c.tell) or None, "stale_after": c.stale_after, "stale": c.is_stale(),
                       "essence": body, "essence_chars": len(raw or ""), "claims": c.claims, "trusted": trusted})
            return
        click.echo(untrusted.as_data(f"{c.id} ({c.origin}) {c.path}"))
        if not trusted:
            click.echo("  UNTRUSTED: its folder is not trusted, so the hook does not deliver it "
                       f"(`recalld crystals trust {_shell(_project(cwd))}` once you have read it)")
        click.echo(untrusted.as_data(f"  on: {', '.join(c.on)}\n  match: {', '.join(c.match)}\n  tell: {c.tell or '-'}"))
        click.echo(f"  stale_after: {c.stale_after or '-'}{'  (STALE: withheld)' if c.is_stale() else ''}")
        click.echo(f"  essence: {len(raw or '')} chars, {c.claims} marked claim(s)\n")
        click.echo(body or "(the file no longer parses)")

    @group.command(name="test")
    @click.option("--act", required=True, type=click.Choice(list(crystals.ACTS)))
    @click.argument("text", required=False, default=None)
    @click.option("--session", help="Use this session's served counts for the order (read only).")
    @cwd_opt
    @json_opt
    def test_cmd(act, text, session, cwd, as_json):
        """What would fire for ACT on TEXT, and what the packer would deliver. Records nothing.

        For --act commit without TEXT, the staged file list of the repository is used."""
        if text is None:
            if act == "commit":
                from recalld.hook.run import _staged_files

                text = "\n".join(_staged_files(cwd))
            elif act != "boot":
                raise Fail("give the act's TEXT (the command line, path + content, brief or prompt)")
        conn = _readonly_conn() if session else None
        res = dry_run(act, text or "", cwd, session, conn=conn)
        if as_json:
            echo_json(res)
            return
        acc = res["accounting"]
        click.echo(f"act {act}: {acc['matched']} crystal(s) match; budget {res['budget']}, cap {res['cap']}, "
                   f"wanted {acc['wanted_chars']} chars")
        for p in res["placed"]:
            extra = ""
            if p["outcome"] == "cut":
                extra = f" (cut {p['cut_chars']} chars, {p['cut_claims']} marked claim(s) in the cut tail)"
            click.echo(f"  {p['outcome']:8} {untrusted.as_data(p['id']):32} {p['delivered_chars']:>5}/{p['wanted_chars']:<5} "
                       f"keys: {untrusted.as_data(', '.join(p['keys'])) or '-'}{extra}")
        if res["crystals"]["failed"]:
            click.echo(f"  ({res['crystals']['failed']} unparseable or skipped file(s): `recalld crystals lint`)")
        if res["crystals"].get("untrusted_indexed"):
            click.echo(f"  ({res['crystals']['untrusted']} matching crystal(s) of "
                       f"{res['crystals']['untrusted_indexed']} in an untrusted project folder withheld: "
                       "`recalld crystals list`)")
        if res["text"]:
            click.echo("\n--- delivered ---\n" + res["text"])

    @group.command(name="lint")
    @cwd_opt
    @json_opt
    @click.option("--share", default=0.25, show_default=True, type=click.FloatRange(0, 1),
                  help="Flag a key that matched more than this share of recent acts of its kinds.")
    @click.option("--min-acts", default=20, show_default=True, type=click.IntRange(1),
                  help="Recent acts needed before judging a key's share.")
    @click.option("--strict", is_flag=True, help="Exit non-zero on warnings too.")
    def lint_cmd(cwd, as_json, share, min_acts, strict):
        """The admission test, where a machine can check it."""
        project = _project(cwd)
        index = crystals.load_for(project)  # untrusted crystals are linted too, and flagged
        probs = lint(index, settings.load(), _hook_receipts(project), share=share, min_acts=min_acts)
        if as_json:
            click.echo(json.dumps(probs, indent=2, ensure_ascii=False))
        elif not probs:
            click.echo(f"{len(index.crystals)} crystal(s), no problems")
        else:
            for p in probs:
                click.echo(f"{p['level']:7} {p['code']:14} {p['id'] or '-'}: {p['message']}")
        errors = sum(1 for p in probs if p["level"] == "error")
        if errors or (strict and probs):
            raise SystemExit(1)

    @group.command(name="trust")
    @click.argument("directory", required=False, type=click.Path(file_okay=False, exists=True))
    @json_opt
    def trust_cmd(directory, as_json):
        """Let the hook deliver a project's crystals (DIRECTORY's repository, default: current).

        Records .recalld/crystals/ with the sha256 of each crystal file in RECALLD_HOME. A cloned
        repository's crystals are withheld until then, and again whenever a file is added,
        removed or changed. Read them first: `recalld crystals list` and `show ID`.
        Refused in an agent's tool shell: trust is the user's to give."""
        refuse_in_agent_shell("crystals trust")
        res = trust_folder(directory)
        if as_json:
            echo_json(res)
            return
        for c in res["crystals"]:
            click.echo(f"  {c['id']:32} on={','.join(c['on']):16} match: {', '.join(c['match'])}")
        for f in res["failures"]:
            click.echo(f"  skipped {f['path']}: {f['reason']}")
        click.echo(f"trusted {res['dir']}: {len(res['files'])} file(s), {len(res['crystals'])} crystal(s); "
                   "any change to them withholds them again until you trust the folder anew")

    @group.command(name="untrust")
    @click.argument("directory", required=False, type=click.Path(file_okay=False, exists=True))
    def untrust_cmd(directory):
        """Stop delivering a project's crystals (DIRECTORY's repository, default: current)."""
        project = _project(directory)
        d = crystals.directories(project)[0][1]
        was = (trust.read().get(d) or {}).get("action") == "trust"
        trust.record(d, "untrust", project)
        click.echo(f"untrusted {d}" + ("" if was else " (it was not trusted)"))

    @group.command(name="stats")
    @cwd_opt
    @json_opt
    @click.option("--all-projects", is_flag=True, help="Count receipts of every project.")
    def stats_cmd(cwd, as_json, all_projects):
        """From receipts: matches per act, wanted chars vs budget, acts over budget, withheld."""
        project = _project(cwd)
        index = crystals.load_for(project)
        s = stats(index, _hook_receipts(None if all_projects else project))
        if as_json:
            echo_json(s)
            return
        if not s["acts"]:
            click.echo("no crystal acts in the receipts yet")
            return
        m, w = s["matches_per_act"], s["wanted_chars"]
        click.echo(f"acts: {s['acts']}  matches per act: median {m['median']}, mean {m['mean']}, max {m['max']}")
        for a, v in s["by_act"].items():
            click.echo(f"  {a:11} {v['acts']:>6} acts, median {v['median_matches']} matches")
        click.echo(f"wanted chars per act: median {w['median']}, max {w['max']} (budget {s['budget']})")
        click.echo(f"acts over budget: {s['share_over_budget']:.0%}")
        o = s["outcomes"]
        click.echo(f"outcomes: whole {o['whole']}, cut {o['cut']}, tell {o['tell']}, withheld {o['withheld']}, "
                   f"stale {o['stale']}")
        click.echo(f"chars delivered {s['chars_delivered']}, cut {s['chars_cut']} ({s['claims_cut']} marked "
                   f"claims in cut tails), withheld {s['chars_withheld']}")
        click.echo(f"crystals: {s['crystals']}, never matched {len(s['never_matched'])}, never delivered whole "
                   f"or cut {len(s['never_delivered'])}")
        for i in s["never_delivered"][:20]:
            click.echo(f"  never delivered: {i}")
