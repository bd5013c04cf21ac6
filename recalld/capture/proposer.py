"""The proposer pass: what a session said since its last pass -> a few quoted drafts.

Candidates come from what was said, not from what a model writes (recalld/capture/mine.py):
every statement of the turn is read and scored by cue features and structure (error -> fix).
The best candidates of each chunk of the turn are ranked by their cues (a model's surprise can
join the ranking with `proposals.model_weight`; see MODEL_CLAMP below for why it is off by
default). Nothing is generated, so no model output can be malformed or truncated, and no
draft holds a word the turn did not say. Policies redact and screen the drafts (grounding,
narration, near-duplicates of memories and pending proposals by rapidfuzz), and the session's
budget (`proposals.per_20_turns`) keeps the best of them; survivors are stored as pending
proposals, each with the transcript line (and uuid) it was said on, for the agent to approve,
edit or reject. One receipt per pass, whatever happens: what it read, drafted, rejected and why.

This module cannot write a memory: it imports nothing that does (no recalld.memories, no
recalld.capture.decide), and its database handle (proposal_db.connect) has an authorizer that
refuses writes to the memory tables. tests/test_proposer.py walks the import graph to keep it so.

The daemon runs `run_pass` at each turn end; `recalld propose --transcript FILE` runs the same
function in the foreground, `recalld propose --history` over past sessions (capture/history.py).
"""

import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from recalld.agents.base import Event
from recalld.capture import mine, policies
from recalld.core import proposal_db, receipts, settings

ROLE = "proposer"
WHY_MAX = 160

# How the pass spends the model: the best K_PER_CHUNK candidates (or as many as the pass has
# slots) of every CHUNK_CHARS of the turn are judged (a long turn is judged chunk by chunk, so
# its end gets the same attention as its start).
CHUNK_CHARS = 5_000
K_PER_CHUNK = 8
MAX_CHUNK_DRAFTS = 4
# The pass's slots: max_drafts for every SLOT_CHARS of what the turn said, at most
# MAX_CHUNK_DRAFTS times max_drafts. Per 5,000 characters this cut a dense plan (8,900
# characters, a dozen decisions and constraints a reader marked) to 6 drafts; a turn with few
# candidates is not affected, the slots only bind when many candidates clear the confidence.
SLOT_CHARS = 2_500
# The model's share of a pass is bounded: at most MAX_JUDGED candidates, and no new one once
# `proposals.timeout_s` has passed (the rest keep their cue ranking; the receipt says so).
MAX_JUDGED = 32
# A model may rank the candidates (`proposals.model_weight` > 0; off by default): how surprising
# a statement is to it, in nats per token after a neutral "Notes:" (boilerplate and progress
# reports are predictable; decisions, names, versions and causes are not), as a distance from
# SURPRISE_CENTER in SURPRISE_SCALE units (the mean and standard deviation over every statement
# of the shared transcripts), clamped to +-MODEL_CLAMP, added to the cue score with that weight.
# It is off by default: outside the transcripts those two constants came from, the embedded
# 135M model's surprise told the statements worth keeping from the rest no better than chance
# (docs/capture.md, "Ranking"), and a term that separates nothing only moves good drafts out of
# a session's budget. No model is asked "keep this note?" either: it did worse than chance.
MODEL_CLAMP = 2.0
SURPRISE_CONTEXT = "Notes:\n"
SURPRISE_CENTER = 5.2
SURPRISE_SCALE = 1.1
# What the pass is surest of: a draft's confidence is a logistic of its final score (the cue
# score, plus the model's term when one ranks) around GATE, so `min_confidence` 0.5 drafts
# only what scores GATE or more, and a pass keeps at most MAX_PER_TURN of those, best first (the
# slots and the session's budget bind first). Chosen on the development projects alone
# (`python -m recalld.bench.capture --curve`) as the fewest proposals that kept recall there;
# under the session's budget it barely matters. Between the floor and the gate sit one-cue
# statements ("The project already has `igniter` as a dependency"): mined, ranked, and left out
# as low_confidence.
GATE = 2.5
MAX_PER_TURN = 12
SCORE_TIMEOUT_S = 10.0


# --- the pass ------------------------------------------------------------------------------


@dataclass
class PassResult:
    source: str
    session: "str | None" = None
    outcome: str = "nothing"  # stored | nothing | skipped | error | timeout
    from_line: int = 0
    to_line: int = 0
    window_chars: int = 0  # characters of the turn read (all of it)
    window_events: int = 0
    turns: int = 0  # user requests read
    boundaries: int = 0
    statements: int = 0  # statements the turn was cut into
    substantive: int = 0  # turns that count for the session's budget (mine.substantive_turns)
    candidates: int = 0  # statements with a cue above the floor
    passed_over: dict = field(default_factory=dict)  # why -> statements read and not candidates
    judged: int = 0  # candidates the model judged
    chunks: int = 0
    ranked: list = field(default_factory=list, repr=False)  # mine.Span judged, best first (benchmarks)
    drafts: list = field(default_factory=list)  # policies.Draft (redacted), best first
    rejected: list = field(default_factory=list)  # (Draft, reason)
    redactions: dict = field(default_factory=dict)
    stored_ids: list = field(default_factory=list)
    model: "str | None" = None
    model_ms: float = 0.0
    model_error: "str | None" = None  # why the model did not judge (cue ranking only)
    error: "str | None" = None
    receipt_uid: "str | None" = None
    duration_ms: float = 0.0
    project: "str | None" = None
    agent: "str | None" = None
    started: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def rejections(self) -> dict:
        return dict(Counter(reason for _, reason in self.rejected))

    @property
    def kept(self) -> list:
        return [d for d in self.drafts if all(d is not x for x, _ in self.rejected)]

    def as_dict(self) -> dict:
        return {
            "source": self.source, "session": self.session, "outcome": self.outcome,
            "from_line": self.from_line, "to_line": self.to_line, "window_chars": self.window_chars,
            "window_events": self.window_events, "turns": self.turns, "substantive": self.substantive,
            "boundaries": self.boundaries,
            "statements": self.statements, "candidates": self.candidates, "passed_over": self.passed_over,
            "judged": self.judged,
            "chunks": self.chunks,
            "drafts": [d.as_dict() for d in self.drafts],
            "rejected": [dict(d.as_dict(), reason=r) for d, r in self.rejected],
            "rejections": self.rejections, "redactions": self.redactions, "stored_ids": self.stored_ids,
            "model": self.model, "model_ms": round(self.model_ms, 1), "model_error": self.model_error,
            "error": self.error, "receipt_uid": self.receipt_uid, "duration_ms": round(self.duration_ms, 1),
        }


def _clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _error_code(e: BaseException) -> str:
    # Error messages can quote the turn: redact before they reach a receipt.
    msg = policies.redact(str(e).split("\n", 1)[0][:200])[0]
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _turn_cut(events: list) -> "tuple[list, int] | None":
    """Events up to the last turn end, and the last line fully consumed (None: no turn end)."""
    last = None
    for i, ev in enumerate(events):
        if ev.kind == "turn_end":
            last = i
    if last is None:
        return None
    line = events[last].line_no
    # A turn end can be synthesized on the line of the next prompt: leave that line unread.
    if any(ev.line_no == line for ev in events[last + 1:]):
        line -= 1
    return events[: last + 1], line


def _scope_of(events: list, boundaries: list) -> tuple:
    project = next((e.project for e in reversed(events) if e.project), None)
    if project is None:
        project = next((b["project"] for b in reversed(boundaries) if b.get("project")), None)
    agents = Counter(e.agent for e in events if e.agent)
    agent = agents.most_common(1)[0][0] if agents else next(
        (b["agent"] for b in reversed(boundaries) if b.get("agent")), "main")
    if agent == "sidechain" or agent.startswith("agent-"):
        agent = "main"  # a subagent's turn is drafted for the session's agent
    return project, agent or "main"


def on_turn_end(session: str, events: list) -> "PassResult | None":
    """The daemon's turn-end hook (wired in `recalld daemon run`, recalld/cli/daemon.py): one pass over
    the turn the daemon just saw end (it hands over that turn's events, each once)."""
    cfg = settings.load()
    if (cfg.get("proposals") or {}).get("enabled") is False:
        return None
    transcript = next((e.source for e in reversed(events) if e.source), None)
    return run_pass(transcript, session=session, events=events, origin="daemon", cfg=cfg)


def pass_config(cfg: "dict | None") -> dict:
    return {**policies.DEFAULTS, **(settings.DEFAULTS.get("proposals") or {}), **((cfg or {}).get("proposals") or {})}


def run_pass(transcript: "str | None" = None, *, session: "str | None" = None, origin: str = "daemon",
             whole: bool = False, complete_turns: bool = False, events: "list | None" = None,
             cfg: "dict | None" = None, runtime=None, db_path=None, conn=None) -> PassResult:
    """One pass over what is new: the unread part of `transcript` (all of it with `whole`; up to
    its last turn end with `complete_turns`), or exactly `events` when the daemon hands over a
    finished turn, plus the session's stop-hook boundaries no pass has read. Without a
    transcript, the boundaries alone. Never raises for a model or store problem: the receipt
    says what happened. `runtime=False` ranks by cues alone (no model is loaded)."""
    cfg = cfg if cfg is not None else settings.load()
    pc = pass_config(cfg)
    source = os.path.realpath(transcript) if transcript else f"stop-hook:{session}"
    res = PassResult(source=source, session=session)
    r = receipts.new("proposer", origin)
    r["act"] = "turn-end"
    res.receipt_uid = r["uid"]
    own = conn is None
    try:
        if own:
            conn = proposal_db.connect(db_path)
        _pass(conn, res, r, transcript, whole, complete_turns, events, pc, cfg, runtime)
    except Exception as e:
        res.outcome, res.error = "error", _error_code(e)
    finally:
        res.duration_ms = (time.perf_counter() - res.started) * 1000
    if not r.get("_stored"):
        _fill_receipt(r, res)
        receipts.record(conn, r)
    if own and conn is not None:
        conn.close()
    return res


def _fill_receipt(r: dict, res: PassResult) -> None:
    res.duration_ms = (time.perf_counter() - res.started) * 1000
    r["session"], r["project"], r["agent"] = res.session, res.project, res.agent
    r["outcome"] = res.outcome
    r["error"] = res.error
    r["duration_ms"] = round(res.duration_ms, 3)
    r["candidates"] = len(res.drafts)
    r["above_floor"] = len(res.drafts) - len(res.rejected)
    r["withheld"] = len(res.rejected)
    # What the pass read, drafted, rejected and why; lines, counts and reasons, never text.
    r["detail"].update({
        "from_line": res.from_line, "to_line": res.to_line, "window_chars": res.window_chars,
        "window_events": res.window_events, "turns": res.turns, "substantive": res.substantive,
        "boundaries": res.boundaries,
        "statements": res.statements, "mined": res.candidates, "passed_over": res.passed_over,
        "judged": res.judged, "chunks": res.chunks,
        "drafts": len(res.drafts), "rejections": res.rejections, "redactions": res.redactions,
        "draft_lines": [d.line for d in res.drafts], "model": res.model, "model_ms": round(res.model_ms, 1),
        "model_error": res.model_error,
    })


def _events_of(conn, res: PassResult, transcript, whole, complete_turns, given) -> "tuple | None":
    """(events, from_line - 1, to_line) of this pass; None when the pass ends here (res says why)."""
    start = 0 if whole else proposal_db.cursor(conn, res.source)
    if given is not None:
        # The daemon delivers each turn's events once; a subagent's turn can end inside the
        # main turn in the same file, so the line cursor must not filter them.
        events = [e for e in given if e.kind != "turn_end" or e is given[-1]]
        start = min((e.line_no for e in events), default=start + 1) - 1
        return events, start, max((e.line_no for e in events), default=start)
    if not transcript:
        return [], start, start
    from recalld.daemon import transcripts

    events = [e for e in transcripts.parse_file(transcript) if e.line_no > start]
    if events and not res.session:
        res.session = events[-1].session
    if complete_turns:
        cut = _turn_cut(events)
        if cut is None:
            res.outcome, res.from_line, res.to_line = "skipped", start + 1, start
            res.error = "no complete turn since the previous pass"
            return None
        events, to_line = cut
        return events, start, to_line
    return events, start, max((e.line_no for e in events), default=start)


def _pass(conn, res: PassResult, r: dict, transcript, whole, complete_turns, given, pc, cfg, runtime) -> None:
    got = _events_of(conn, res, transcript, whole, complete_turns, given)
    if got is None:
        return
    events, start, to_line = got
    boundaries = proposal_db.boundaries_since(conn, res.session, proposal_db.last_boundary(conn, res.session))
    if not transcript:
        to_line = max((b["id"] for b in boundaries), default=start)
        start = proposal_db.last_boundary(conn, res.session)
    res.from_line, res.to_line = start + 1, to_line
    res.boundaries = len(boundaries)
    boundary_id = max((b["id"] for b in boundaries), default=None)
    events = events + _boundary_events(events, boundaries, res)
    mined = mine.mine(events)
    res.window_chars, res.window_events = mined.chars, len(events)
    res.turns, res.statements, res.candidates = len(mined.requests), mined.statements, len(mined.spans)
    res.passed_over = mined.passed_over
    res.redactions = dict(mined.redactions)
    project, agent = _scope_of(events, boundaries)
    res.project, res.agent = project, agent
    # Without a transcript the user's prompts are not seen: each stop-hook boundary is a turn.
    res.substantive = mine.substantive_turns(mined) if transcript else len(boundaries)

    def settle(c, drafts: list) -> list:
        # The session's budget is read in the transaction that spends it. The pass's best drafts
        # take the room and the rest are withheld; what is stored keeps the pass's order, the
        # order of `res.kept` and so of the ids returned.
        room = _room(c, res, pc)
        if room is not None and len(drafts) > room:
            best = _budget_order(drafts)[:room]
            res.rejected += [(d, "over_budget") for d in drafts if all(d is not b for b in best)]
            drafts = [d for d in drafts if any(d is b for b in best)]
        if not drafts and res.outcome == "stored":
            res.outcome = "nothing"
        _fill_receipt(r, res)
        return drafts

    def consume(kept: list, again=()) -> None:
        _fill_receipt(r, res)
        res.stored_ids = proposal_db.store_pass(
            conn, r, session=res.session, source=res.source, from_line=res.from_line, to_line=res.to_line,
            boundary_id=boundary_id, window_chars=res.window_chars, drafts=kept, project=project or "",
            agent=agent, model=res.model, again=again, turns=res.substantive, settle=settle)
        r["_stored"] = True

    if not mined.spans:
        res.outcome = "nothing"  # nothing worth drafting: consume the turn so the next pass starts after it
        consume([])
        return
    if project is None:
        res.outcome, res.error = "skipped", "no project: the turn names no cwd"
        return
    ranked = res.ranked = _rank(mined, res, pc, cfg, runtime)
    memories = proposal_db.memory_texts(conn, project, agent)
    # Each undecided proposal in its wordings (as drafted, as edited): a repeat of either is one.
    wordings = [(p, t) for p in proposal_db.pending_rows(conn, project) for t in dict.fromkeys((p["text"], p["current"]))]
    pending_rows, pending = [p for p, _ in wordings], [t for _, t in wordings]
    limit = _slots(mined, pc)
    res.drafts = [_draft(sp) for sp in ranked]
    screened = policies.screen(res.drafts, memories=memories, pending=pending, requests=mined.requests,
                               window=mined.text, cfg={**pc, "max_drafts": limit})
    res.rejected = screened.rejected
    red = Counter(res.redactions)
    red.update(screened.redactions)
    res.redactions = dict(red)
    res.outcome = "stored" if screened.kept else "nothing"
    consume(screened.kept, _said_again(screened.again, pending_rows))
    if not res.stored_ids:
        res.outcome = "nothing"


def _budget_order(drafts: list) -> list:
    return sorted(drafts, key=lambda d: -(d.confidence or 0))


def _said_again(again: list, pending_rows: list) -> list:
    """(proposal id, draft, reword) for every draft repeating a pending proposal; reword marks
    the one repeat per proposal (the best-worded of the pass's) that is better worded than the
    proposal's own text."""
    best: dict = {}
    for d, i in again:
        pid = pending_rows[i]["id"]
        if pid not in best or policies.better_worded(d, best[pid]):
            best[pid] = d
    out = []
    for d, i in again:
        row = pending_rows[i]
        old = policies.Draft(kind=row["kind"], text=row["current"], confidence=row["confidence"])
        out.append((row["id"], d, d is best[row["id"]] and row["state"] == "pending" and policies.better_worded(d, old)))
    return out


def _boundary_events(events: list, boundaries: list, res: PassResult) -> list:
    """Stop-hook messages the transcript does not hold (yet): read as the agent's text."""
    seen = " ".join(" ".join((e.text or "").split()) for e in events if e.kind == "text")
    out = []
    for b in boundaries:
        t = " ".join((b.get("text") or "").split())
        if t and t.lstrip("…")[:120] not in seen:
            out.append(Event(session=res.session or "", cwd=None, project=b.get("project"),
                             agent=b.get("agent") or "main", role="assistant", kind="text", text=b["text"],
                             source=res.source, line_no=res.to_line))
    return out


def _room(conn, res: PassResult, pc: dict) -> "int | None":
    """How many drafts the session may still take (None: no budget, or no session to count
    against). After n substantive turns a session may have drafted n * per_20_turns / 20,
    rounded down: the rate a reviewer can keep up with (12 per 20 turns) by construction, not by
    a fitted gate, at every point of the session. Any session may draft its one best statement,
    a short one too; unspent room carries over, so a rich turn after quiet ones may use it."""
    rate = float(pc.get("per_20_turns") or 0) / 20
    if not res.session or rate <= 0:
        return None
    turns, drafted = proposal_db.session_use(conn, res.session)
    n = turns + res.substantive
    return max(0, max(1, math.floor(rate * n + 1e-9)) - drafted)


def _slots(mined, pc: dict) -> int:
    # A pasted document (mine.PASTE_CHARS) buys no slots: pages of a decision record are not a
    # conversation that said that much.
    said = max(0, mined.said_chars - mined.paste_chars)
    return min(MAX_PER_TURN, int(pc["max_drafts"]) * min(MAX_CHUNK_DRAFTS, said // SLOT_CHARS + 1))


def _rank(mined, res: PassResult, pc: dict, cfg, runtime) -> list:
    """Candidates in the order the pass drafts them: per chunk of the turn, the best by cues,
    judged by the model when there is one; every candidate gets a confidence."""
    spans = mined.spans
    for sp in spans:
        sp.chunk = 0
    # Chunks follow the turn's text: a candidate's chunk is where its line falls.
    lines = sorted({sp.line for sp in spans})
    per_line = max(1, mined.said_chars // CHUNK_CHARS + 1)
    res.chunks = per_line
    if per_line > 1 and lines:
        lo, hi = lines[0], lines[-1] + 1
        for sp in spans:
            sp.chunk = min(per_line - 1, (sp.line - lo) * per_line // max(1, hi - lo))
    # A chunk offers at least the pass's slots: a plan said in one message is one transcript
    # line, so all its candidates fall in one chunk.
    k = max(K_PER_CHUNK, _slots(mined, pc))
    chosen = []
    for c in range(res.chunks):
        chosen.extend(sorted((sp for sp in spans if sp.chunk == c), key=lambda sp: -sp.score)[:k])
    weight = float(pc.get("model_weight") or 0.0)
    if weight > 0:
        rt = _runtime(res, cfg, runtime)
    else:
        rt, res.model_error = None, ("not asked for (cue ranking only)" if runtime is False else
                                     "off: proposals.model_weight is 0 (cue ranking only)")
    t0 = time.perf_counter()
    budget_s = float(pc.get("timeout_s") or 60)
    by_cue = {id(sp): n for n, sp in enumerate(sorted(chosen, key=lambda sp: -sp.score))}
    for sp in chosen:
        if rt is not None and (by_cue[id(sp)] >= MAX_JUDGED or time.perf_counter() - t0 > budget_s):
            if time.perf_counter() - t0 > budget_s:
                res.model_error = f"model budget of {budget_s:g} s spent after {res.judged} candidates"
        elif rt is not None:
            try:
                ((total, n),) = rt.logliks(SURPRISE_CONTEXT, [sp.text], timeout_s=SCORE_TIMEOUT_S)
                sp.model = (-total / max(1, n) - SURPRISE_CENTER) / SURPRISE_SCALE
                res.judged += 1
            except Exception as e:
                # A failing judge falls back to the cues for the rest of the pass.
                res.model_error = _error_code(e)
                rt = None
        m = 0.0 if sp.model is None else max(-MODEL_CLAMP, min(MODEL_CLAMP, sp.model))
        sp.final = sp.score + weight * m
    res.model_ms = (time.perf_counter() - t0) * 1000 if res.judged else 0.0
    return sorted(chosen, key=lambda sp: (-sp.final, sp.line))


def _runtime(res: PassResult, cfg, runtime):
    if runtime is False:
        res.model_error = "not asked for (cue ranking only)"
        return None
    if runtime is None:
        from recalld.model import runtime as llm
        from recalld.model.errors import ModelFailed, Unavailable

        try:
            runtime = llm.require_runtime(ROLE, cfg)
        except (Unavailable, ModelFailed) as e:  # a worker that died loading: rank by cues
            res.model_error = _error_code(e)
            return None
    res.model = getattr(runtime, "name", None) or os.path.basename(getattr(runtime, "model_path", "") or "") or None
    return runtime


_CUE_WORDS = {"decision": "a decision", "reason": "with its reason", "constraint": "a rule or warning",
              "cause": "a cause", "state": "a fact about the project", "preference": "the user's preference",
              "error_fixed": "an error and what fixed it", "error_repeated": "an error that kept coming back",
              "error_once": "an error", "command_runs": "how it is run", "remember": "marked for later"}
_ROLE_WORDS = {"user": "said by the user", "agent": "said by the agent",
               "answer": "the user's answer to the agent's question", "report": "in a subagent's report",
               "delegation": "in the agent's task for a subagent", "error": "a failing command and what followed",
               "command": "a command and what the agent said it brought up"}


def _draft(sp) -> "policies.Draft":
    cues = [w for c, w in _CUE_WORDS.items() if c in sp.cues]
    why = f"{', '.join(cues) or 'a statement'}; {_ROLE_WORDS.get(sp.role, sp.role)}, {sp.where()}"
    conf = 1.0 / (1.0 + math.exp(-(sp.final - GATE)))
    d = policies.coerce({"kind": sp.kind, "text": sp.text, "why": _clip(why, WHY_MAX), "confidence": round(conf, 3)})
    d.role, d.line, d.line_to, d.uuid = sp.role, sp.line, sp.line_to, sp.uuid
    return d


def format_result(res: PassResult) -> str:
    """What `recalld propose` prints."""
    lines = [f"proposer pass over {res.source} lines {res.from_line}-{res.to_line}: {res.outcome}"
             + (f" ({res.error})" if res.error else "")]
    lines.append(f"  read: {res.window_chars} chars, {res.window_events} events, {res.turns} requests, "
                 f"{res.boundaries} stop-hook boundaries; {res.statements} statements, {res.candidates} candidates, "
                 f"{res.judged} judged by {res.model or 'no model'} in {res.model_ms / 1000:.1f} s"
                 + (f" ({res.model_error})" if res.model_error else ""))
    if res.passed_over:
        lines.append("  passed over: " + ", ".join(f"{k} {v}" for k, v in sorted(res.passed_over.items(),
                                                                                key=lambda kv: (-kv[1], kv[0]))))
    if res.redactions:
        lines.append("  redacted: " + ", ".join(f"{k} {v}" for k, v in sorted(res.redactions.items())))
    for pid, d in zip(res.stored_ids, res.kept):
        lines.append(f"  stored p{pid} [{d.kind}] {d.text}  (line {d.line})")
    for d, reason in res.rejected:
        lines.append(f"  rejected ({reason}) [{d.kind}] {_clip(d.text, 200)}")
    if res.rejections:
        lines.append("  rejections: " + ", ".join(f"{k} {v}" for k, v in sorted(res.rejections.items())))
    if not res.drafts and res.outcome in ("nothing", "stored"):
        lines.append("  no drafts")
    if res.stored_ids:
        lines.append("  decide: recalld proposals approve|edit|reject ID, or walk them: recalld proposals review")
    return "\n".join(lines)
