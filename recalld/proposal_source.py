"""The hook's proposal source (standard library only: it runs inside `recalld hook`).

Two jobs at a session's hooks:
- On `stop` (Claude Stop/SubagentStop, Codex Stop, Gemini AfterAgent) append a turn boundary,
  with the agent's last message redacted, inside the receipt's transaction. The daemon's
  proposer reads what is new since the previous boundary, off the hook's path.
- On `prompt-submit`, `pre-tool` and `stop`, bring the session's undecided drafts to the agent:
  one short block per batch (one proposer pass) with the ids and the exact commands, packed
  inside the budget like any other item. Each batch is shown at most `proposals.show_times`
  times (counted in `served`), so an ignored batch stops costing context.
"""

from recalld import drafts, pack

# prompt-submit, pre-tool (its acts) and stop
SHOW_ACTS = ("prompt", "bash", "write", "delegate", "tool", "stop")
BOUNDARY_TEXT_CHARS = 4000
DRAFT_CHARS = 280
COMMANDS = ("Decide on each (nothing is saved until you approve): "
            "`recalld proposals approve ID [--scope agent|project|shared] [--kind K] [--supersedes MID]`, "
            "`recalld proposals edit ID --text \"...\"` then approve, "
            "`recalld proposals reject ID --reason \"...\"` "
            "(MCP: proposals_approve, proposals_edit, proposals_reject). "
            "Approve only what is true, durable and not already in the code or history.")


def _cfg(ctx) -> dict:
    c = ctx.cfg.get("proposals") if isinstance(ctx.cfg, dict) else None
    return c if isinstance(c, dict) else {}


def items(ctx) -> list:
    hi = ctx.hi
    cfg = _cfg(ctx)
    if not hi.session or cfg.get("enabled") is False:
        return []
    if hi.act == "stop":
        _queue_boundary(ctx)
    if hi.act not in SHOW_ACTS:
        return []
    rows = drafts.pending_for_session(ctx.conn, hi.session, limit=int(cfg.get("show_max", 5)) * 4)
    if not rows:
        return []
    batches: dict = {}
    for r in rows:
        batches.setdefault(f"pb:{r['pass_id']}" if r["pass_id"] else f"p:{r['id']}", []).append(r)
    times = int(cfg.get("show_times", 2))
    out, shown = [], 0
    for key, batch in batches.items():
        seen = ctx.conn.execute(
            "SELECT count(*) FROM served WHERE session = ? AND item = ? AND outcome IN ('whole', 'cut', 'tell')",
            (hi.session, key)).fetchone()[0]
        if seen >= times:
            continue
        batch = batch[: max(0, int(cfg.get("show_max", 5)) - shown)]
        if not batch:
            break
        shown += len(batch)
        out.append(_item(key, batch))
    ctx.detail["proposals_pending"] = len(rows)
    ctx.detail["proposals_shown"] = shown
    ctx.receipt["candidates"] += shown
    ctx.receipt["above_floor"] += shown
    return out


def _item(key: str, batch: list) -> "pack.Item":
    lines = []
    for r in batch:
        text = " ".join((r["edited_text"] or r["text"]).split())
        if len(text) > DRAFT_CHARS:
            text = text[: DRAFT_CHARS - 1] + "…"
        state = " (edited)" if r["state"] == "edited" else ""
        lines.append(f"p{r['id']} {r['kind']}{state}: {text}")
    ids = " ".join(f"p{r['id']}" for r in batch)
    body = "\n".join(lines + [COMMANDS])
    tell = f"{len(batch)} drafted memories ({ids}) await your decision: `recalld proposals list`"
    return pack.Item(key=key, source="proposal", label=f"drafts for review · {len(batch)}", body=body,
                     tell=tell, meta={"proposal_ids": [r["id"] for r in batch]})


def _queue_boundary(ctx) -> None:
    from recalld import policies  # regexes compiled only on stop, not on every prompt

    hi = ctx.hi
    text, found = policies.redact(hi.text or "")
    if len(text) > BOUNDARY_TEXT_CHARS:
        # The end of the last message is where the agent concludes.
        text = "…" + text[-(BOUNDARY_TEXT_CHARS - 1):]
    if found:
        ctx.detail["boundary_redactions"] = sum(found.values())
    payload = hi.payload if isinstance(hi.payload, dict) else {}
    transcript = payload.get("agent_transcript_path") or hi.transcript_path
    uid = ctx.receipt.get("uid")

    def write(conn):
        drafts.record_boundary(conn, session=hi.session, project=ctx.scope.project, agent=ctx.scope.agent,
                               origin="stop-hook", native_event=hi.native_event,
                               transcript_path=transcript if isinstance(transcript, str) else None,
                               text=text, receipt_uid=uid)

    ctx.after_commit.append(write)
