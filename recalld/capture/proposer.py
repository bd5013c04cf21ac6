"""The proposer pass: what is new in a session since its last boundary -> a few drafts.

A small local model (the same shared runtime as the judge, role "proposer") reads a compact
window of the turn: the user's requests, the agent's conclusions, errors and what followed
them. It drafts at most a few candidates as grammar-constrained JSON {kind, text, why,
confidence}. Policies redact and screen them; survivors are stored as pending proposals for the
agent to approve, edit or reject. One receipt per pass, whatever happens.

This module cannot write a memory: it imports nothing that does (no recalld.store, no
recalld.proposals), and its database handle (drafts.connect) has an authorizer that refuses
writes to the memory tables. tests/test_proposer.py walks the import graph to keep it so.

The daemon runs `run_pass` at each turn end; `recalld propose --transcript FILE` runs the same
function in the foreground.
"""

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from recalld.core import drafts, receipts, settings
from recalld.capture import policies

ROLE = "proposer"
KINDS = list(policies.KINDS)
TEXT_MAX = 320
WHY_MAX = 160

SCHEMA = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": KINDS},
                    "text": {"type": "string", "minLength": 1, "maxLength": TEXT_MAX},
                    "why": {"type": "string", "maxLength": WHY_MAX},
                    "confidence": {"type": "number"},
                },
                "required": ["kind", "text", "why", "confidence"],
            },
        },
    },
    "required": ["memories"],
}

SYSTEM = ("You read an excerpt of a coding session and write down the few things a future session "
          "must know. You answer only with JSON.")

# A 135M model cannot be trusted to write new prose (the seeds' proposer invented a statistic),
# and given a worked example it copies the example. So it is asked to pick and copy; the
# policies then reject anything not grounded in the window (docs/capture.md has examples).
INSTRUCTIONS = """Below is an excerpt of a coding session. Find up to {n} sentences in it that a future session on this project must know: a decision with its reason, the cause of an error and its fix, or a surprising fact about the project. Copy each sentence as written. kind is one of {kinds}. why says in a few words why it matters later. confidence is how sure you are that it is true and useful later, from 0 to 1. Skip sentences about what the agent is doing or will do, and what the user asked. If there is none, answer {{"memories": []}}.

Excerpt:
{window}

Answer:"""

# Lines the agent harness writes into the user's turn; not requests.
_NOT_REQUESTS = ("[Request interrupted", "<command-name>", "<command-message>", "<local-command",
                 "Caveat:", "<system-reminder>", "<user-prompt-submit-hook>")
_NOT_ERRORS = ("The user doesn't want to proceed", "The user doesn't want to take this action")


# --- the window ----------------------------------------------------------------------------


@dataclass
class Piece:
    order: int
    priority: int  # 0 first to keep when the window is over budget
    text: str


@dataclass
class Window:
    text: str = ""
    events: int = 0  # events read since the previous boundary
    pieces: int = 0  # pieces kept in the window
    dropped: int = 0  # pieces dropped to fit the budget
    turns: int = 0  # user requests in the window
    requests: list = field(default_factory=list)
    redactions: Counter = field(default_factory=Counter)


def _clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def build_window(events: list, boundary_texts: list = (), max_chars: int = 3000) -> Window:
    """The turn, compact: requests, conclusions, errors and what followed them. Every piece is
    redacted before the model sees it."""
    w = Window(events=len(events))
    pieces: list = []
    last_call = None
    last_text_idx: dict = {}  # turn number -> index in pieces of that turn's last agent text
    turn = 0

    def clean(text):
        # Redact the whole text before clipping: a cut can separate a secret from the context
        # that identifies it (the "@host" of a URL password, the name of an assignment).
        red, found = policies.redact(text or "")
        w.redactions.update(found)
        return red

    def add(priority, text):
        pieces.append(Piece(len(pieces), priority, text))
        return len(pieces) - 1

    for ev in events:
        if ev.kind == "turn_end":
            turn += 1
            continue
        if ev.kind == "prompt":
            t = (ev.text or "").strip()
            if not t or t.startswith(_NOT_REQUESTS):
                continue
            t = clean(t)
            add(0, "USER: " + _clip(t, 400))
            w.requests.append(_clip(t, 400))
            w.turns += 1
        elif ev.kind == "text" and ev.role == "assistant":
            t = clean((ev.text or "").strip())
            if not t:
                continue
            idx = add(2, "AGENT: " + _clip(t, 500))
            last_text_idx[turn] = idx
        elif ev.kind == "tool_call":
            last_call = ev
        elif ev.kind == "tool_result" and ev.is_error:
            t = (ev.text or "").strip()
            if t.startswith(_NOT_ERRORS):
                continue
            if last_call is not None and last_call.tool == ev.tool:
                add(1, f"AGENT RAN {ev.tool}: " + _clip(clean(last_call.text), 160))
            add(1, f"ERROR from {ev.tool or 'tool'}: " + _clip(clean(t), 240))
    # The last thing the agent said in a turn is usually its conclusion.
    for idx in last_text_idx.values():
        pieces[idx].priority = 1
    seen = " ".join(p.text for p in pieces)
    for t in boundary_texts:
        t = " ".join(clean(t).split())
        if t and t[:120] not in seen:  # the transcript may lag the stop hook
            pieces.append(Piece(len(pieces), 1, "AGENT (final): " + _clip(t, 600)))
    keep, used = [], 0
    for p in sorted(pieces, key=lambda p: (p.priority, -p.order)):
        if used + len(p.text) + 1 > max_chars:
            w.dropped += 1
            continue
        keep.append(p)
        used += len(p.text) + 1
    keep.sort(key=lambda p: p.order)
    w.pieces = len(keep)
    w.text = "\n".join(p.text for p in keep)
    return w


def build_prompt(window: Window, n: int = 3) -> str:
    return INSTRUCTIONS.format(n=n, window=window.text, kinds="|".join(KINDS))


# --- the pass ------------------------------------------------------------------------------


@dataclass
class PassResult:
    source: str
    session: "str | None" = None
    outcome: str = "nothing"  # stored | nothing | skipped | error | timeout
    from_line: int = 0
    to_line: int = 0
    window_chars: int = 0
    window_events: int = 0
    turns: int = 0
    boundaries: int = 0
    drafts: list = field(default_factory=list)  # policies.Draft (redacted)
    rejected: list = field(default_factory=list)  # (Draft, reason)
    redactions: dict = field(default_factory=dict)
    stored_ids: list = field(default_factory=list)
    model: "str | None" = None
    model_ms: float = 0.0
    error: "str | None" = None
    receipt_uid: "str | None" = None
    duration_ms: float = 0.0
    project: "str | None" = None
    agent: "str | None" = None
    started: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def rejections(self) -> dict:
        return dict(Counter(reason for _, reason in self.rejected))

    def as_dict(self) -> dict:
        return {
            "source": self.source, "session": self.session, "outcome": self.outcome,
            "from_line": self.from_line, "to_line": self.to_line, "window_chars": self.window_chars,
            "window_events": self.window_events, "turns": self.turns, "boundaries": self.boundaries,
            "drafts": [d.as_dict() for d in self.drafts],
            "rejected": [dict(d.as_dict(), reason=r) for d, r in self.rejected],
            "rejections": self.rejections, "redactions": self.redactions, "stored_ids": self.stored_ids,
            "model": self.model, "model_ms": round(self.model_ms, 1), "error": self.error,
            "receipt_uid": self.receipt_uid, "duration_ms": round(self.duration_ms, 1),
        }


def _error_code(e: BaseException) -> str:
    # Error messages can quote model output or input: redact before they reach a receipt.
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
    if agent == "sidechain":
        agent = "main"
    return project, agent or "main"


PREEMPTED = "preempted: the judge needed the model"
PREEMPT_RETRIES = 3
PREEMPT_WAIT_S = 3.0


def on_turn_end(session: str, events: list) -> "PassResult | None":
    """The daemon's turn-end hook (wired in `recalld daemon run`, recalld/cli/daemon.py): one pass over
    the turn the daemon just saw end (it hands over that turn's events, each once)."""
    cfg = settings.load()
    if (cfg.get("proposals") or {}).get("enabled") is False:
        return None
    transcript = next((e.source for e in reversed(events) if e.source), None)
    for attempt in range(PREEMPT_RETRIES + 1):
        res = run_pass(transcript, session=session, events=events, origin="daemon", cfg=cfg)
        if res.error != PREEMPTED or attempt == PREEMPT_RETRIES:
            return res
        # The daemon hands each turn over once, so a pass the judge preempted is tried again
        # here, after the judge's pass (six likelihood calls, ~2 s with the embedded model).
        time.sleep(PREEMPT_WAIT_S)


def run_pass(transcript: "str | None" = None, *, session: "str | None" = None, origin: str = "daemon",
             whole: bool = False, complete_turns: bool = False, events: "list | None" = None,
             cfg: "dict | None" = None, runtime=None, db_path=None) -> PassResult:
    """One pass over what is new: the unread part of `transcript` (all of it with `whole`; up to
    its last turn end with `complete_turns`), or exactly `events` when the daemon hands over a
    finished turn, plus the session's stop-hook boundaries no pass has read. Without a
    transcript, the boundaries alone. Never raises for a model or store problem: the receipt
    says what happened."""
    cfg = cfg or settings.load()
    pc = {**policies.DEFAULTS, **(settings.DEFAULTS.get("proposals") or {}), **(cfg.get("proposals") or {})}
    source = os.path.realpath(transcript) if transcript else f"stop-hook:{session}"
    res = PassResult(source=source, session=session)
    r = receipts.new("proposer", origin)
    r["act"] = "turn-end"
    res.receipt_uid = r["uid"]
    conn = None
    try:
        conn = drafts.connect(db_path)
        _pass(conn, res, r, transcript, whole, complete_turns, events, pc, cfg, runtime)
    except Exception as e:
        res.outcome, res.error = "error", _error_code(e)
    finally:
        res.duration_ms = (time.perf_counter() - res.started) * 1000
    if not r.get("_stored"):
        _fill_receipt(r, res)
        receipts.record(conn, r)
    if conn is not None:
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
    r["detail"].update({
        "from_line": res.from_line, "to_line": res.to_line, "window_chars": res.window_chars,
        "window_events": res.window_events, "turns": res.turns, "boundaries": res.boundaries,
        "drafts": len(res.drafts), "rejections": res.rejections, "redactions": res.redactions,
        "model": res.model, "model_ms": round(res.model_ms, 1),
    })


def _pass(conn, res: PassResult, r: dict, transcript, whole, complete_turns, given, pc, cfg, runtime) -> None:
    events: list = []
    start = 0 if whole else drafts.cursor(conn, res.source)
    if given is not None:
        # The daemon delivers each turn's events once; a subagent's turn can end inside the
        # main turn in the same file, so the line cursor must not filter them.
        events = [e for e in given if e.kind != "turn_end" or e is given[-1]]
        start = min((e.line_no for e in events), default=start + 1) - 1
        to_line = max((e.line_no for e in events), default=start)
    elif transcript:
        from recalld.daemon import transcripts

        events = [e for e in transcripts.parse_file(transcript) if e.line_no > start]
        if events and not res.session:
            res.session = events[-1].session
        if complete_turns:
            cut = _turn_cut(events)
            if cut is None:
                res.outcome, res.from_line, res.to_line = "skipped", start + 1, start
                res.error = "no complete turn since the previous pass"
                return
            events, to_line = cut
        else:
            to_line = max((e.line_no for e in events), default=start)
    boundaries = drafts.boundaries_since(conn, res.session, drafts.last_boundary(conn, res.session))
    if not transcript:
        to_line = max((b["id"] for b in boundaries), default=start)
        start = drafts.last_boundary(conn, res.session)
    res.from_line, res.to_line = start + 1, to_line
    res.boundaries = len(boundaries)
    boundary_id = max((b["id"] for b in boundaries), default=None)
    window = build_window(events, [b["text"] for b in boundaries], int(pc["window_chars"]))
    res.window_chars, res.window_events, res.turns = len(window.text), window.events, window.turns
    res.redactions = dict(window.redactions)
    project, agent = _scope_of(events, boundaries)
    res.project, res.agent = project, agent
    if not window.text.strip():
        # Nothing to read: consume the window so the next pass starts after it.
        res.outcome = "nothing"
        _fill_receipt(r, res)
        drafts.store_pass(conn, r, session=res.session, source=res.source, from_line=res.from_line,
                          to_line=res.to_line, boundary_id=boundary_id, window_chars=0, drafts=[],
                          project=project or "", agent=agent, model=None)
        r["_stored"] = True
        return
    if project is None:
        res.outcome, res.error = "skipped", "no project: the window names no cwd"
        return
    rt = runtime
    if rt is None:
        from recalld.model import runtime as llm

        try:
            rt = llm.require_runtime(ROLE, cfg)
        except llm.Unavailable as e:
            res.outcome, res.error = "skipped", _error_code(e)
            return
    res.model = getattr(rt, "name", None) or os.path.basename(getattr(rt, "model_path", "") or "") or None
    n = int(pc["max_drafts"])
    schema = dict(SCHEMA)
    schema["properties"] = {"memories": dict(SCHEMA["properties"]["memories"], maxItems=n)}
    prompt = build_prompt(window, n)
    # Keep prompt + answer inside the model's context: shrink the window if it does not fit.
    n_ctx = getattr(rt, "n_ctx", None)
    if n_ctx and hasattr(rt, "count_tokens"):
        budget = n_ctx - int(pc["max_tokens"]) - 64
        while rt.count_tokens(SYSTEM + prompt) > budget and len(window.text) > 400:
            window = build_window(events, [b["text"] for b in boundaries], int(len(window.text) * 0.8))
            prompt = build_prompt(window, n)
        res.window_chars = len(window.text)
    t_model = time.perf_counter()
    try:
        out = rt.generate_json(prompt, schema, max_tokens=int(pc["max_tokens"]),
                               timeout_s=float(pc["timeout_s"]), system=SYSTEM)
    except Exception as e:
        res.model_ms = (time.perf_counter() - t_model) * 1000
        if type(e).__name__ == "LLMPreempted":
            # The judge needed the model for the agent's next step. Nothing is stored, so the
            # drafts cursor stays and the next turn end reads this window again.
            res.outcome, res.error = "skipped", PREEMPTED
            return
        timed_out = type(e).__name__ in ("LLMTimeout", "TimeoutError")
        res.outcome, res.error = ("timeout" if timed_out else "error"), _error_code(e)
        return
    res.model_ms = (time.perf_counter() - t_model) * 1000
    raw = out.get("memories") if isinstance(out, dict) else out
    raw = raw if isinstance(raw, list) else []
    screened = policies.screen(
        raw, memories=drafts.memory_texts(conn, project, agent), pending=drafts.pending_texts(conn, project),
        requests=window.requests, window=window.text, cfg=pc)
    res.drafts = [d for d in screened.kept] + [d for d, _ in screened.rejected]
    res.rejected = screened.rejected
    red = Counter(res.redactions)
    red.update(screened.redactions)
    res.redactions = dict(red)
    res.outcome = "stored" if screened.kept else "nothing"
    _fill_receipt(r, res)
    res.stored_ids = drafts.store_pass(
        conn, r, session=res.session, source=res.source, from_line=res.from_line, to_line=res.to_line,
        boundary_id=boundary_id, window_chars=res.window_chars, drafts=screened.kept, project=project,
        agent=agent, model=res.model)
    r["_stored"] = True
    if not res.stored_ids:
        res.outcome = "nothing"


def format_result(res: PassResult) -> str:
    """What `recalld propose` prints."""
    lines = [f"proposer pass over {res.source} lines {res.from_line}-{res.to_line}: {res.outcome}"
             + (f" ({res.error})" if res.error else "")]
    lines.append(f"  window: {res.window_chars} chars from {res.window_events} events, {res.turns} requests, "
                 f"{res.boundaries} stop-hook boundaries; model {res.model or '-'} {res.model_ms / 1000:.1f} s")
    if res.redactions:
        lines.append("  redacted: " + ", ".join(f"{k} {v}" for k, v in sorted(res.redactions.items())))
    kept = [d for d in res.drafts if all(d is not x for x, _ in res.rejected)]
    for pid, d in zip(res.stored_ids, kept):
        lines.append(f"  stored p{pid} [{d.kind}] {d.text}")
    for d, reason in res.rejected:
        lines.append(f"  rejected ({reason}) [{d.kind}] {_clip(d.text, 200)}")
    if res.rejections:
        lines.append("  rejections: " + ", ".join(f"{k} {v}" for k, v in sorted(res.rejections.items())))
    if not res.drafts and res.outcome in ("nothing", "stored"):
        lines.append("  no drafts")
    if res.stored_ids:
        lines.append("  decide: recalld proposals approve|edit|reject ID (see `recalld proposals list`)")
    return "\n".join(lines)
