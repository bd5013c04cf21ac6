"""The crystal source of the hook: crystals bound to this act, in fair order (stdlib only).

Order (fair scheduling, docs/crystals.md): least served this session first, then longest unheard, then shortest.
"Served" means delivered whole or cut: a tell is a degradation, and counting it as a hearing
would let the short crystals that always fit keep a long one behind them forever. Counts and
last-heard times come from the append-only `served` table (migration 1), so they never move
backwards. A git commit has no agent session; its crystals rotate per project
(session key `git:<project>`).

Delivery (`deliver:` in the crystal, docs/crystals.md): a `gate` crystal matched at an event
the agent lets a hook hold (its adapter's gate_events: a tool call, a commit) is marked
`gate` the first time it matches in the gate session, and the hook holds the act with it;
when it matches again there, it passes (the act runs, nothing is added). Holds are remembered
in `served` as `gate:c:<id>` rows.
"""

import os

from recalld import agents
from recalld import crystals
from recalld.core import packer

MAX_RESPONSE = 20_000


def act_text(hi) -> str:
    """What a crystal matches for this act. tool-result adds the tool's response, or the
    failure's message (an error message is often the moment a crystal matters)."""
    if hi.act != "tool-result":
        return hi.text
    resp = (hi.payload or {}).get("tool_response")
    parts = [hi.text]
    error = (hi.payload or {}).get("error")  # Claude Code's PostToolUseFailure
    if isinstance(error, str):
        parts.append(error)
    if isinstance(resp, str):
        parts.append(resp)
    elif isinstance(resp, dict):
        for k in ("stdout", "stderr", "output", "error", "content", "llmContent", "returnDisplay"):
            v = resp.get(k)
            if isinstance(v, str):
                parts.append(v)
    return "\n".join(p for p in parts if p)[:MAX_RESPONSE]


def rotation_session(hi, project: "str | None") -> "str | None":
    if hi.session:
        return hi.session
    if hi.act == "commit" and project:
        return f"git:{project}"
    return None


def gate_session(hi, project: "str | None") -> "str | None":
    """Where a crystal's hold is remembered: the agent's session; for a commit, the commit being
    made (the project at its HEAD), so the retried commit passes and the next one is held."""
    if hi.act == "commit":
        return f"git:{project}@{(hi.payload or {}).get('head') or ''}" if project else None
    return hi.session


def held_before(conn, session: "str | None", keys: list) -> set:
    """The crystal keys already held once in this gate session."""
    if conn is None or not session or not keys:
        return set()
    gkeys = ["gate:" + k for k in keys]
    rows = conn.execute(f"SELECT DISTINCT item FROM served WHERE session = ? AND item IN "
                        f"({','.join('?' * len(gkeys))})", [session, *gkeys]).fetchall()
    return {r[0][5:] for r in rows}


def served_stats(conn, session: "str | None", keys: list) -> dict:
    """{item key: (times served whole or cut, last time)} for this session."""
    if conn is None or not session or not keys:
        return {}
    out = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        rows = conn.execute(
            f"SELECT item, count(*), max(time) FROM served WHERE session = ? AND item IN "
            f"({','.join('?' * len(chunk))}) AND outcome IN ('whole', 'cut') GROUP BY item",
            [session, *chunk]).fetchall()
        for item, n, last in rows:
            out[item] = (n, last or "")
    return out


def order(matched: list, stats: dict) -> list:
    """matched: [(crystal, keys)] -> the same, fairest first."""
    def rank(m):
        c = m[0]
        n, last = stats.get(c.key, (0, ""))
        return (n, last, c.essence_chars, c.id)

    return sorted(matched, key=rank)


def to_items(matched: list, today: "date | None" = None) -> tuple:
    """(packer Items, crystals whose file stopped parsing since it was indexed)."""
    items, lost = [], []
    for c, keys in matched:
        body = crystals.essence(c)
        if body is None:
            lost.append(c)
            continue
        items.append(packer.Item(key=c.key, source="crystal", label=f"crystal {c.id}", body=body,
                               tell=c.tell, stale=c.is_stale(today), meta={"keys": keys, "deliver": c.deliver}))
    return items, lost


def candidates(index: "crystals.Index", hi, conn, project: "str | None",
               today: "date | None" = None) -> tuple:
    """(ordered Items, detail dict) for one act: what `recalld crystals test` shows and what
    the hook packs."""
    matched = index.match(hi.act, act_text(hi))
    stats = served_stats(conn, rotation_session(hi, project), [c.key for c, _ in matched])
    items, lost = to_items(order(matched, stats), today)
    detail = {
        "indexed": len(index),
        "failed": len(index.failures) + len(lost),
        "cache": index.cache,
        "matched": len(items),
        "stale": sum(1 for i in items if i.stale),
        # payload-free: the keys come from the crystal files, not from the act's text
        "hits": {i.key[2:]: i.meta["keys"] for i in items},
    }
    failed = [os.path.basename(f.path) for f in index.failures] + [os.path.basename(c.path) for c in lost]
    if failed:
        detail["failed_files"] = failed[:10]
    for code, key in (("oversize", "oversize"), ("symlink", "symlinks")):
        n = sum(1 for f in index.failures if f.code == code)
        if n:
            detail[key] = n  # skipped unread: over crystals.MAX_FILE_BYTES, or a symlink leading out
    if index.trust:
        # Payload-free like the rest: a state per folder and counts; the agent is told nothing.
        detail["trust"] = sorted(set(index.trust.values()))
    if index.untrusted:
        held = crystals.Index(index.untrusted, [], [], index.cache).match(hi.act, act_text(hi))
        detail["untrusted"] = len(held)  # matched this act, withheld: the folder is not trusted
        detail["untrusted_indexed"] = len(index.untrusted)
    return items, detail


def items(ctx) -> list:
    hi = ctx.hi
    if hi.act not in crystals.ACTS:
        return []
    project = ctx.scope.project if ctx.scope else None
    index = crystals.load_for(project)
    found, detail = candidates(index, hi, ctx.conn, project)
    found = _mark_gates(ctx, found, detail, project)
    ctx.detail["crystals"] = detail
    ctx.receipt["candidates"] += len(found)
    ctx.receipt["above_floor"] += len(found)
    session = rotation_session(hi, project)
    if found and session and not hi.session:
        # The hook records served rows per agent session only; a commit rotates per project.
        ctx.after_commit.append(lambda conn: _record_served(conn, ctx.receipt, session))
    return found


def _mark_gates(ctx, found: list, detail: dict, project: "str | None") -> list:
    """Mark the gate crystals this act may be held for; drop those held before in this gate
    session (the act they were held for was re-issued: it passes)."""
    hi = ctx.hi
    adapter = agents.by_name(hi.agent_kind)
    session = gate_session(hi, project)
    gates = [i for i in found if i.meta.get("deliver") == "gate"]
    if not gates or adapter is None or hi.event not in adapter.gate_events or not session:
        return found
    held = held_before(ctx.conn, session, [i.key for i in gates])
    if held:
        detail["passed"] = sorted(k[2:] for k in held)
    for i in gates:
        i.meta["gate"] = i.key not in held
    return [i for i in found if i.key not in held]


def record_holds(conn, r: dict, session: str, keys: list) -> None:
    """The holds this run made (in the receipt's transaction): the retry then passes."""
    conn.executemany("INSERT INTO served (time, session, item, outcome, receipt_uid) VALUES (?,?,?,?,?)",
                     [(r["time"], session, "gate:" + k, "gate", r["uid"]) for k in keys])


def _record_served(conn, r: dict, session: str) -> None:
    placed = ((r.get("detail") or {}).get("packed") or {}).get("items") or []
    rows = [(r["time"], session, it[0], it[1], r["uid"]) for it in placed
            if str(it[0]).startswith("c:") and it[1] in ("whole", "cut", "tell")]
    if rows:
        conn.executemany("INSERT INTO served (time, session, item, outcome, receipt_uid) VALUES (?,?,?,?,?)", rows)
