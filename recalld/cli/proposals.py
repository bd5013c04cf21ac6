"""`recalld proposals list|show|approve|edit|reject|review|bulk` and `recalld propose
--transcript FILE | --history` (the same decisions as MCP tools: recalld.mcp.tools). Thin: the work is in
recalld.capture.decide (decisions), recalld.capture.proposer (the pass),
recalld.capture.history (past sessions) and recalld.cli.review (the walk)."""

import os

import click

from recalld.capture import decide
from recalld import memories

KINDS = list(memories.KINDS)
SCOPES = ["agent", "project", "shared"]
STATE_CHOICES = ["open", "pending", "edited", "approved", "rejected", "all"]


def _states(state: str):
    return {"open": decide.OPEN, "all": None}.get(state, (state,))


def _short(text: str, n: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def fmt_proposal(p: dict, full: bool = False) -> str:
    eff = p["effective"]
    state = p["state"] + (f" as m{p['memory_id']}" if p["memory_id"] else "")
    conf = f", confidence {p['confidence']:.2f}" if isinstance(p.get("confidence"), (int, float)) else ""
    head = f"p{p['id']} [{eff['kind']}{', ' + eff['scope'] if eff['scope'] else ''}] ({state}{conf})"
    if not full:
        return f"{head} {_short(eff['text'])}"
    lines = [head, f"    {eff['text']}"]
    if eff["text"] != p["text"]:
        lines.append(f"    drafted as: {p['text']}")
    if p.get("why"):
        lines.append(f"    why: {p['why']}")
    if eff.get("tell"):
        lines.append(f"    tell: {eff['tell']}")
    lines.append(f"    session {p['session'] or '-'} · project {p['project']} · agent {p['agent']} · "
                 f"drafted {p['time'][:19]} by {p['model'] or '?'} from {p['source'] or '?'} "
                 f"lines {p['window_from']}-{p['window_to']}")
    for e in p["events"]:
        bits = [f"    {e['time'][:19]} {e['from_state']} -> {e['to_state']}"]
        if e["memory_id"]:
            bits.append(f"m{e['memory_id']}")
        if e["actor"]:
            bits.append(f"by {e['actor']}")
        if e["reason"]:
            bits.append(f"reason: {e['reason']}")
        lines.append(" ".join(bits))
    return "\n".join(lines)


def register(cli):
    from recalld.cli.common import Fail, echo_json, fmt_memory, open_db, resolve_scope

    @cli.group()
    def proposals():
        """Drafted memories awaiting the agent's decision (approve, edit, reject)."""

    @proposals.command("list")
    @click.option("--state", type=click.Choice(STATE_CHOICES), default="open", show_default=True)
    @click.option("--session", help="Only drafts from this session.")
    @click.option("--all-projects", is_flag=True, help="Not only this project's proposals.")
    @click.option("--cwd", type=click.Path(file_okay=False), help="Resolve the project from here.")
    @click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
    @click.option("--json", "as_json", is_flag=True)
    def list_cmd(state, session, all_projects, cwd, limit, as_json):
        """List proposals (by default: undecided ones of this project)."""
        conn = open_db()
        project = None if all_projects else resolve_scope(cwd).project
        rows = decide.list_(conn, project=project, session=session, states=_states(state), limit=limit)
        if as_json:
            echo_json(rows)
            return
        if not rows:
            click.echo("no proposals")
            return
        for p in rows:
            click.echo(fmt_proposal(p))

    @proposals.command("show")
    @click.argument("proposal_id")
    @click.option("--json", "as_json", is_flag=True)
    def show_cmd(proposal_id, as_json):
        """One proposal with its draft, why, provenance and every transition."""
        conn = open_db()
        try:
            p = decide.get(conn, proposal_id)
        except decide.ProposalError as e:
            raise Fail(str(e))
        if p is None:
            raise Fail(f"p{decide.parse_id(proposal_id)} does not exist")
        if as_json:
            echo_json(p)
        else:
            click.echo(fmt_proposal(p, full=True))

    @proposals.command("approve")
    @click.argument("proposal_id")
    @click.option("--scope", "scope_name", type=click.Choice(SCOPES), help="Default: the edited scope, else project.")
    @click.option("--kind", type=click.Choice(KINDS), help="Default: the (edited) draft's kind.")
    @click.option("--supersedes", multiple=True, help="Memory id the approved memory replaces (repeatable).")
    @click.option("--session", help="Your session id, for provenance.")
    @click.option("--json", "as_json", is_flag=True)
    def approve_cmd(proposal_id, scope_name, kind, supersedes, session, as_json):
        """Commit the draft as a memory (durable before this returns) and print what changed."""
        conn = open_db()
        try:
            d = decide.approve(conn, proposal_id, scope=scope_name, kind=kind, supersedes=supersedes,
                            actor="cli", session=session)
        except (decide.ProposalError, memories.StoreError) as e:
            raise Fail(str(e))
        if as_json:
            echo_json(d.as_dict())
            return
        click.echo(f"approved p{d.proposal['id']}")
        click.echo(f"remembered {fmt_memory(d.memory)}")
        if d.redacted:
            click.echo(f"redacted before storing: {memories.describe_secrets(d.redacted)}")
        for m in d.superseded:
            click.echo(f"superseded {fmt_memory(m)}")
        if d.similar:
            click.echo("\nThese current memories look related; supersede any that this replaces (nothing was changed):")
            for s in d.similar:
                click.echo(f"  m{s['id']} ({s['relation']}, similarity {s['similarity']}): {_short(s['text'])}")

    @proposals.command("edit")
    @click.argument("proposal_id")
    @click.option("--text", help="The memory as it should be written (one knowing, with its reason).")
    @click.option("--kind", type=click.Choice(KINDS))
    @click.option("--scope", "scope_name", type=click.Choice(SCOPES))
    @click.option("--tell", help="One line that carries the claim when the text cannot fit.")
    @click.option("--reason", help="Why it was edited.")
    @click.option("--session", help="Your session id, for provenance.")
    @click.option("--json", "as_json", is_flag=True)
    def edit_cmd(proposal_id, text, kind, scope_name, tell, reason, session, as_json):
        """Change what approval will write (the draft stays pending until approved or rejected)."""
        conn = open_db()
        try:
            d = decide.edit(conn, proposal_id, text=text, kind=kind, scope=scope_name, tell=tell, reason=reason,
                         actor="cli", session=session)
        except decide.ProposalError as e:
            raise Fail(str(e))
        if as_json:
            echo_json(d.as_dict())
        else:
            click.echo(f"edited {fmt_proposal(d.proposal, full=True)}")
            if d.redacted:
                click.echo(f"redacted before storing: {memories.describe_secrets(d.redacted)}")
            click.echo(f"approve it with: recalld proposals approve {d.proposal['id']}")

    @proposals.command("reject")
    @click.argument("proposal_id")
    @click.option("--reason", required=True, help="Why it should not be remembered.")
    @click.option("--session", help="Your session id, for provenance.")
    @click.option("--json", "as_json", is_flag=True)
    def reject_cmd(proposal_id, reason, session, as_json):
        """Decline the draft (kept, marked rejected, never written)."""
        conn = open_db()
        try:
            d = decide.reject(conn, proposal_id, reason, actor="cli", session=session)
        except decide.ProposalError as e:
            raise Fail(str(e))
        if as_json:
            echo_json(d.as_dict())
        else:
            click.echo(f"rejected p{d.proposal['id']}: {d.event['reason']}")

    @proposals.command("review")
    @click.option("--kind", type=click.Choice(KINDS), help="Only drafts of this kind.")
    @click.option("--older-than", "older_than", metavar="AGE", help="Only drafts older than this (30d, 12h, 2w).")
    @click.option("--session", help="Only drafts from this session.")
    @click.option("--all-projects", is_flag=True, help="Not only this project's proposals.")
    @click.option("--cwd", type=click.Path(file_okay=False), help="Resolve the project from here.")
    @click.option("--from-start", is_flag=True, help="Start at the oldest draft, not after the last one shown.")
    def review_cmd(kind, older_than, session, all_projects, cwd, from_start):
        """Walk the pending drafts one by one: approve, edit in $EDITOR, reject with a reason, skip, quit."""
        from recalld.cli import review

        conn = open_db()
        project = None if all_projects else resolve_scope(cwd).project
        rows = review.select(conn, project=project, session=session, kind=kind,
                             older_than=review.parse_age(older_than))
        if not rows:
            click.echo("no drafts to review")
            return
        rows = review.order(rows, 0 if from_start else review.load_cursor(project))
        done = review.walk(conn, rows, project=project)
        left = len(review.select(conn, project=project, session=session, kind=kind,
                                 older_than=review.parse_age(older_than)))
        click.echo(f"\napproved {done['approved']}, edited {done['edited']}, rejected {done['rejected']}, "
                   f"skipped {done['skipped']}; {left} pending"
                   + ("; `recalld proposals review` goes on where this one stopped" if left else ""))

    @proposals.command("bulk")
    @click.argument("action", type=click.Choice(["approve", "reject"]))
    @click.option("--kind", type=click.Choice(KINDS), help="Only drafts of this kind.")
    @click.option("--older-than", "older_than", metavar="AGE", help="Only drafts older than this (30d, 12h, 2w).")
    @click.option("--session", help="Only drafts from this session.")
    @click.option("--all-projects", is_flag=True, help="Not only this project's proposals.")
    @click.option("--cwd", type=click.Path(file_okay=False), help="Resolve the project from here.")
    @click.option("--reason", help="Why (required to reject).")
    @click.option("--dry-run", is_flag=True, help="Only list what would be decided.")
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.option("--json", "as_json", is_flag=True)
    def bulk_cmd(action, kind, older_than, session, all_projects, cwd, reason, dry_run, yes, as_json):
        """Approve or reject every pending draft that matches the filters (--kind, --older-than, --session)."""
        from recalld.cli import review

        if action == "reject" and not (reason or "").strip() and not dry_run:
            raise Fail("bulk reject needs --reason: it is how the proposer's misses are studied")
        conn = open_db()
        project = None if all_projects else resolve_scope(cwd).project
        rows = review.select(conn, project=project, session=session, kind=kind,
                             older_than=review.parse_age(older_than))
        if dry_run or not rows:
            if as_json:
                echo_json({"action": action, "matched": [p["id"] for p in rows], "decided": []})
            else:
                for p in rows:
                    click.echo(fmt_proposal(p))
                click.echo(f"{len(rows)} pending drafts match" + ("" if dry_run else "; nothing to do"))
            return
        if not yes and not click.confirm(f"{action} {len(rows)} proposals?", default=False, err=True):
            raise Fail("nothing changed")
        decided, errors = [], []
        for p in rows:
            try:
                if action == "approve":
                    d = decide.approve(conn, p["id"], actor="cli-bulk", check_similar=False)
                else:
                    d = decide.reject(conn, p["id"], reason, actor="cli-bulk")
                decided.append(d.as_dict())
            except (decide.ProposalError, memories.StoreError) as e:
                errors.append(str(e))
        if as_json:
            echo_json({"action": action, "matched": [p["id"] for p in rows], "decided": decided, "errors": errors})
        else:
            click.echo(f"{action}d {len(decided)} of {len(rows)} proposals" + (f"; {len(errors)} failed" if errors else ""))
            for e in errors:
                click.echo(f"  {e}")
        if errors:
            raise SystemExit(1)

    @cli.command("propose")
    @click.option("--transcript", "transcript", type=click.Path(exists=True, dir_okay=False),
                  help="A Claude Code or Codex transcript (JSONL).")
    @click.option("--all", "whole", is_flag=True, help="Read the whole file, not only the part no pass has read.")
    @click.option("--history", is_flag=True,
                  help="Mine the project's past Claude Code and Codex sessions (resumable; what a pass read is not read again).")
    @click.option("--project", "project_dir", type=click.Path(file_okay=False),
                  help="With --history: the project (default: the current directory's).")
    @click.option("--all-projects", is_flag=True, help="With --history: every project's sessions.")
    @click.option("--since", metavar="DATE", help="With --history: sessions modified since (YYYY-MM-DD, or 30d, 2w).")
    @click.option("--json", "as_json", is_flag=True)
    def propose_cmd(transcript, whole, history, project_dir, all_projects, since, as_json):
        """Run proposer passes: over the unread part of a transcript (what the daemon runs), or --history."""
        from recalld.capture import proposer

        if history == bool(transcript):
            raise Fail("give either --transcript FILE or --history")
        if history:
            _history(project_dir, all_projects, since, as_json)
            return
        res = proposer.run_pass(transcript, origin="cli", whole=whole)
        if as_json:
            echo_json(res.as_dict())
            if res.outcome == "error":
                raise SystemExit(1)
            return
        click.echo(proposer.format_result(res))
        if res.outcome == "error":
            raise Fail(f"the pass failed: {res.error}")

def _history(project_dir, all_projects, since, as_json):
    from recalld.capture import history
    from recalld.cli.common import Fail, echo_json
    from recalld.core import settings
    from recalld.core.scope import resolve_project

    cfg = settings.load()
    try:
        since_ts = history.parse_since(since)
    except ValueError as e:
        raise Fail(str(e))
    project = None if all_projects else resolve_project(project_dir)
    sessions = history.find_sessions(project, since_ts, cfg)
    summary = mine_history(sessions, project, cfg, since=since)
    if as_json:
        echo_json(summary)
        return
    print_history(summary)


def mine_history(sessions: list, project, cfg: dict, since=None) -> dict:
    """Every unread turn of `sessions`, one proposer pass each, with a progress bar on stderr;
    the summary `propose --history` prints (also the end of `recalld install`)."""
    import sys
    import time

    from recalld.capture import history
    from recalld.core import proposal_db

    runtime = _history_runtime(cfg)
    t0 = time.perf_counter()
    results = []
    dconn = proposal_db.connect()
    try:
        with click.progressbar(sessions, label=f"mining {len(sessions)} sessions", file=sys.stderr,
                               item_show_func=lambda s: os.path.basename(s.path)[:40] if s else None) as bar:
            for s in bar:
                results.append(history.mine_session(s, runtime=runtime, cfg=cfg, conn=dconn))
    finally:
        dconn.close()
    secs = time.perf_counter() - t0
    read = [m for m in results if m.passes]
    rate = round(len(read) / (secs / 60), 1) if read and secs > 0 else None
    return {"project": project, "since": since, "sessions": len(sessions), "sessions_read": len(read),
            "passes": sum(m.passes for m in results), "proposals": sum(m.proposals for m in results),
            "failed_passes": sum(m.errors for m in results), "seconds": round(secs, 1),
            "sessions_per_minute": rate, "model": getattr(runtime, "name", None) if runtime else None,
            "files": [{"path": m.path, "passes": m.passes, "proposals": m.proposals,
                       "resumed_after_line": m.skipped_lines} for m in results]}


def print_history(summary: dict) -> None:
    where = "every project" if summary["project"] is None else summary["project"]
    rate = summary["sessions_per_minute"]
    click.echo(f"{summary['sessions']} sessions of {where}; {summary['sessions_read']} had unread turns: "
               f"{summary['passes']} passes, {summary['proposals']} proposals in {summary['seconds']:.1f} s"
               + (f" ({rate} sessions/min)" if rate else "")
               + ("" if summary["model"] else "; no model, ranked by cues alone"))
    if summary["proposals"]:
        click.echo("review them: recalld proposals review")


def _history_runtime(cfg):
    """The proposer's model, loaded once for the whole run; False (cues alone) when there is none
    or none ranks (`proposals.model_weight` 0, the default)."""
    from recalld.capture import proposer
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable

    if float(proposer.pass_config(cfg).get("model_weight") or 0) <= 0:
        return False

    try:
        return llm.require_runtime("proposer", cfg)
    except Unavailable as e:
        click.echo(f"no proposer model ({e}); ranking by cues alone", err=True)
        return False
