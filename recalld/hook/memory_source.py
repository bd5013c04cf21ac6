"""The pre-step's memory source: prompt -> candidates -> whole text or a tell (standard library
only: it runs inside `recalld hook prompt-submit`).

The candidates are the lexical search's, in the daemon's fused lexical + dense order when the
semantic channel answered (`candidates`, the one place its answer is read). Which of them go
out whole and which as a one-line tell is recalld/core/tiers.py's decision; the packer places
both under the act's budget, the tells never cut.
"""

from recalld.core import packer, tiers


def memory_items(ctx) -> list:
    """Pre-step recall: whole text for what covers the prompt, tells for the next few."""
    if ctx.hi.act != "prompt" or not ctx.hi.text.strip():
        return []
    from recalld.core.search import search  # after the test: only prompts search

    cfg = ctx.cfg
    tc = tiers.config(cfg)
    limit = int(cfg["max_results"]) * 3
    asked = None
    if cfg.get("semantic_wait_ms"):  # off: then the module is not even imported
        from recalld.hook import semantic  # asked first: the daemon embeds while this searches
        asked = semantic.start(ctx, limit, None)
    hits = search(ctx.conn, ctx.hi.text, ctx.scope, limit=limit, floor=0.0)
    cands = candidates(ctx, asked, hits)
    # Already in this session's context: never the same memory twice, and never a tell for
    # what it got whole or told (a told memory may still come whole on stronger evidence).
    had, told_before = in_context(ctx, [f"m:{c.id}" for c in cands], told=True)
    if had or told_before:
        ctx.detail["in_context"] = sorted(had | told_before)
        cands = [c for c in cands if f"m:{c.id}" not in had]
    whole, told = tiers.choose(cands, tc, not_told={int(k[2:]) for k in told_before})
    ctx.receipt["candidates"] += len(hits)
    ctx.receipt["above_floor"] += len(whole)
    ctx.detail["scores"] = [round(c.coverage, 3) for c in whole]
    if told:
        ctx.detail["tell_scores"] = [[round(c.coverage, 3), None if c.cos is None else round(c.cos, 3)]
                                     for c in told]
    items = [packer.Item(key=f"m:{c.id}", source="memory", label=f"m{c.id} {c.kind}", body=c.text, tell=c.tell)
             for c in whole]
    return items + [tell_item(f"m:{c.id}", c.id, c.text, c.tell, meta={}, chars=tc["chars"], hint=k == 0)
                    for k, c in enumerate(told)]


def tell_item(key: str, mid: int, text: str, tell, meta: dict, chars: "int | None" = None,
              hint: bool = True) -> packer.Item:
    """A memory shown as one line (recalld/core/tiers.py) that the packer never cuts; `hint`:
    the line says how to open it (the first of a block; the label names the others' ids)."""
    if chars is None:
        from recalld.core import settings

        chars = int(settings.DEFAULTS["tells"]["chars"])
    label = f"m{mid} tell"
    return packer.Item(key=key, source="memory" if key.startswith("m:") else "queue", label=label,
                       body=tiers.tell_body(mid, label, text, tell, chars, hint),
                       meta=dict(meta, tier="tell", memory_id=mid))


def candidates(ctx, asked, hits: list) -> list:
    """[tiers.Cand] in the order the pre-step weighs them: the daemon's fused lexical + dense
    order with its cosines when it answered, else the lexical order (coverage only). The ids
    the daemon names are read back through this run's own scope (recalld/hook/semantic.py)."""
    if asked is not None:
        from recalld.hook import semantic

        found = semantic.ranked(ctx, asked, None, hits)  # in the daemon: fused with these, not searched again
        if found is not None:
            cov = {h.id: h.score for h in hits}
            return [tiers.Cand(f.id, f.kind, f.text, f.tell, cov.get(f.id, 0.0), asked.cos.get(f.id), f.via)
                    for f in found]
    return [tiers.Cand(h.id, h.kind, h.text, h.tell, h.score, None, "lexical") for h in hits]


# The session's latest start. `+hook` keeps it on the session's index: on the hook's index,
# which the planner prefers for its order, it would walk every session start ever recorded.
SESSION_START_SQL = ("SELECT time FROM receipts WHERE session = ? AND +hook = 'session-start' "
                     "AND source = 'hook' ORDER BY id DESC LIMIT 1")


def in_context(ctx, keys: list, told: bool = False):
    """The keys delivered (whole or cut) to this agent in this session since the session's
    latest start: they are in its context already. A subagent has a context of its own (its
    receipts name it), and a session start after compaction starts over. With `told`: (those,
    the keys only shown as a tell, here or from the judge's queue)."""
    if not ctx.hi.session or not keys:
        return (set(), set()) if told else set()
    conn, session = ctx.conn, ctx.hi.session
    boot = conn.execute(SESSION_START_SQL, (session,)).fetchone()
    since, agent = boot[0] if boot else "", ctx.receipt.get("agent")
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT DISTINCT s.item, s.outcome IN ('whole', 'cut') FROM served s JOIN receipts r ON r.uid = s.receipt_uid "
        f"WHERE s.session = ? AND s.outcome IN ('whole', 'cut', 'tell', 'told') AND s.time >= ? AND r.agent IS ? "
        f"AND s.item IN ({marks})", [session, since, agent, *keys]).fetchall()
    had = {k for k, w in rows if w}
    if not told:
        return had
    shown = {k for k, w in rows if not w}
    # what the judge's queue showed this session, whole or told, by the memory it named
    # (the item range keeps to served's (session, item) index; the queue row by its id)
    rows = conn.execute(
        f"SELECT DISTINCT 'm:' || q.memory_id FROM served s "
        f"JOIN queue q ON q.id = CAST(substr(s.item, 3) AS INTEGER) JOIN receipts r ON r.uid = s.receipt_uid "
        f"WHERE s.session = ? AND s.item >= 'q:' AND s.item < 'q;' AND s.time >= ? AND r.agent IS ? "
        f"AND 'm:' || q.memory_id IN ({marks})", [session, since, agent, *keys]).fetchall()
    shown |= {r[0] for r in rows}
    return had, shown - had
