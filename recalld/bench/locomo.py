"""LoCoMo recall: each conversation's turns indexed as memories, every question asked through
recalld's real pre-step search, next to a plain SQLite FTS5 BM25 baseline built from the same
memory texts in the same run; the harness the other LoCoMo benchmarks (budget, ablations,
judge, rerank) build on.

The data is CC BY-NC 4.0: it is read from where it lies (--data PATH, default: the development
split in the shared data folder's data/locomo/), never copied into this repository.

    recalld bench locomo [--data PATH] [--quick] [--json]

Retrieval unit: one turn (`dia_id`) = one memory; each conversation is its own project, each
session a thread (docs/evaluation.md, "Threads"). hit@1: the first result is an evidence turn.
recall@5: any evidence turn is in the first 5. Questions whose evidence names no turn of the
conversation are left out (and counted).

Figures: hit@1 and recall@5 per category and overall (categories 1-4) for recalld and the
baseline; the pre-step floor as an abstention curve (adversarial questions that inject nothing
vs answerable ones whose evidence is injected); and, unless --quick, the memory-text styles
compared, the same turns imported without threads, and both per conversation.
"""

import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from recalld import memories
from recalld.bench.common import Unavailable, locomo_path, pct
from recalld.core import db, packer, receipts, settings
from recalld.core.scope import Scope
from recalld.core.search import search
from recalld.hook import payloads
from recalld.hook import run as hook

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ANSWERABLE = (1, 2, 3, 4)
STYLES = ("text", "speaker", "speaker+date")
DEFAULT_STYLE = "speaker+date"
DEPTH = 20  # results kept per question (enough for recall@5 and the budget curve)

# The baseline's stopwords: the common English list (NLTK's), independent of recalld's own
# list so that a better stopword list counts for recalld, not for the baseline.
BASELINE_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing a an the and
but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here
there when where why how all any both each few more most other some such no nor not only own
same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn
doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
""".split())


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    date: str  # the session's date and time, as the data gives it
    caption: "str | None" = None  # a shared image's caption (BLIP), if any


@dataclass
class Question:
    question: str
    category: int
    evidence: list
    answer: "str | None" = None


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple
    turns: list
    questions: list
    dropped: int = 0  # questions whose evidence names no turn here


def _norm_evidence(raw) -> list:
    """'D8:6; D9:17' -> ['D8:6', 'D9:17']; 'D:11:26' -> ['D11:26'] (typos in the data)."""
    out = []
    for e in raw or []:
        for part in re.split(r"[;,\s]+", str(e)):
            m = re.fullmatch(r"D:?(\d+):(\d+)", part.strip())
            if m:
                out.append(f"D{m.group(1)}:{m.group(2)}")
    return out


def load(path=None) -> list:
    path = locomo_path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise Unavailable(f"LoCoMo data: cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"LoCoMo data: {path} is not JSON: {e}") from None
    if not isinstance(data, list):
        raise ValueError(f"LoCoMo data: {path}: expected a list of conversations")
    convs = []
    for n, s in enumerate(data):
        c = s.get("conversation") or {}
        turns = []
        sessions = sorted((k for k, v in c.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)),
                          key=lambda k: int(k.split("_")[1]))
        for k in sessions:
            date = c.get(f"{k}_date_time") or ""
            for t in c[k]:
                if t.get("dia_id") and isinstance(t.get("text"), str):
                    turns.append(Turn(t["dia_id"], t.get("speaker") or "", t["text"], date, t.get("blip_caption")))
        ids = {t.dia_id for t in turns}
        qs, dropped = [], 0
        for q in s.get("qa") or []:
            ev = [e for e in _norm_evidence(q.get("evidence")) if e in ids]
            if not ev:
                dropped += 1
                continue
            ans = q.get("answer", q.get("adversarial_answer"))
            qs.append(Question(str(q.get("question", "")), int(q.get("category", 0)), ev,
                               None if ans is None else str(ans)))
        convs.append(Conversation(s.get("sample_id") or f"conv-{n}", (c.get("speaker_a"), c.get("speaker_b")),
                                  turns, qs, dropped))
    return convs


def memory_text(t: Turn, style: str = DEFAULT_STYLE) -> str:
    if style == "text":
        return t.text
    if style == "speaker":
        return f"{t.speaker}: {t.text}"
    if style == "speaker+date":
        return f"[{t.date}] {t.speaker}: {t.text}" if t.date else f"{t.speaker}: {t.text}"
    raise ValueError(f"unknown style {style!r}; use one of {', '.join(STYLES)}")


def scope_for(conv: Conversation) -> Scope:
    # A fake cwd per conversation: each conversation is its own project.
    return Scope(project=f"/locomo/{conv.sample_id}", agent="main")


def index(conn: sqlite3.Connection, conv: Conversation, style: str = DEFAULT_STYLE, threads: bool = True) -> dict:
    """Write the turns through the real import path; returns {memory id: dia_id}."""
    sc = scope_for(conv)
    # Each session is a thread: a turn follows the turn before it (docs/evaluation.md, "Threads").
    lines = [json.dumps({"text": memory_text(t, style), "kind": "fact", "source": f"locomo:{t.dia_id}",
                         **({"thread": t.dia_id.split(":")[0]} if threads else {})})
             for t in conv.turns]
    results = memories.import_jsonl(conn, lines, sc, source="locomo")
    return {r.memory["id"]: t.dia_id for r, t in zip(results, conv.turns)}


class Baseline:
    """Plain FTS5: porter tokenizer, stopwords dropped, terms OR-ed, ranked by bm25."""

    def __init__(self, conv: Conversation, style: str = DEFAULT_STYLE):
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, dia UNINDEXED, tokenize='porter unicode61')")
        self.conn.executemany("INSERT INTO f (t, dia) VALUES (?, ?)",
                              [(memory_text(t, style), t.dia_id) for t in conv.turns])

    def search(self, question: str, k: int = DEPTH) -> list:
        words = []
        for w in re.findall(r"[^\W_]+", question.lower()):
            if w not in BASELINE_STOPWORDS and w not in words:
                words.append(w)
        if not words:
            return []
        match = " OR ".join('"' + w + '"' for w in words)
        return [r[0] for r in self.conn.execute(
            "SELECT dia FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, k))]


@dataclass
class Asked:
    """One question's results from both systems (kept for the budget curve and abstention)."""
    sample_id: str
    question: str
    category: int
    evidence: list
    answer: "str | None"
    recalld: list = field(default_factory=list)  # [(dia_id, memory id, score)] best first
    baseline: list = field(default_factory=list)  # [dia_id] best first
    search_ms: float = 0.0
    # the best score the same question gets in ANOTHER conversation's project: an unrelated
    # prompt that shares the everyday vocabulary (the floor's null distribution)
    unrelated_top: float = 0.0


def hit_at(ranked: list, evidence, k: int) -> bool:
    ev = set(evidence)
    return any(d in ev for d in ranked[:k])


def ask_all(path=None, style: str = DEFAULT_STYLE, *, categories=(1, 2, 3, 4, 5),
            keep_store: bool = False, searcher=None, threads: bool = True):
    """Index every conversation into a fresh store and ask every question.

    Returns (asked, info); with keep_store, info["conn"] and info["maps"] stay open for
    callers that need the store (budget curve, judge, re-ranker)."""
    convs = load(path)
    tmp = tempfile.TemporaryDirectory(prefix="recalld-locomo-")
    conn = db.connect(Path(tmp.name) / "recalld.db")
    conn.execute("PRAGMA synchronous = OFF")  # a throwaway store: durability is not measured here
    asked, maps, t_index = [], {}, 0.0
    searcher = searcher or search
    # Index everything first: one store holds every conversation (as a real store holds many
    # projects), so document frequencies are the same whichever question is asked first.
    for conv in convs:
        t0 = time.perf_counter()
        maps[conv.sample_id] = index(conn, conv, style, threads)
        t_index += time.perf_counter() - t0
    for ci, conv in enumerate(convs):
        id2dia = maps[conv.sample_id]
        base = Baseline(conv, style)
        sc = scope_for(conv)
        other = scope_for(convs[(ci + 1) % len(convs)]) if len(convs) > 1 else None
        for q in conv.questions:
            if q.category not in categories:
                continue
            t0 = time.perf_counter()
            hits = searcher(conn, q.question, sc, limit=DEPTH, floor=0.0)
            ms = (time.perf_counter() - t0) * 1000
            elsewhere = searcher(conn, q.question, other, limit=1, floor=0.0) if other else []
            asked.append(Asked(conv.sample_id, q.question, q.category, q.evidence, q.answer,
                               [(id2dia[h.id], h.id, h.score) for h in hits], base.search(q.question), ms,
                               elsewhere[0].score if elsewhere else 0.0))
    info = {"path": str(locomo_path(path)), "style": style, "threads": threads,
            "conversations": len(convs), "memories": sum(len(c.turns) for c in convs),
            "questions": len(asked), "dropped_no_evidence": sum(c.dropped for c in convs),
            "index_s": round(t_index, 3)}
    if keep_store:
        info.update(conn=conn, maps=maps, tmp=tmp, convs=convs)
    else:
        conn.close()
        tmp.cleanup()
    return asked, info


def summarize(asked: list, ranked=lambda a: [d for d, _, _ in a.recalld]) -> dict:
    """hit@1 and recall@5 per category and overall (categories 1-4)."""
    out = {}
    groups = {CATEGORIES[c]: [a for a in asked if a.category == c] for c in ANSWERABLE}
    groups["overall"] = [a for a in asked if a.category in ANSWERABLE]
    for name, qs in groups.items():
        n = len(qs)
        out[name] = {
            "n": n,
            "hit@1": round(sum(hit_at(ranked(a), a.evidence, 1) for a in qs) / n, 3) if n else None,
            "recall@5": round(sum(hit_at(ranked(a), a.evidence, 5) for a in qs) / n, 3) if n else None,
        }
    return out


def quality(asked: list) -> dict:
    return {"recalld": summarize(asked), "baseline": summarize(asked, lambda a: a.baseline)}


# --- what reaches the model: floor, abstention, budget -------------------------------------


def prestep_items(conn, text: str, sc: Scope, cfg: dict) -> list:
    """The pre-step's memory items for a prompt, through the hook's own source function."""
    hi = payloads.HookInput(event="prompt-submit", agent_kind="claude", native_event="UserPromptSubmit",
                            session=None, cwd=None, act="prompt", text=text)
    ctx = hook.Ctx(hi, conn, cfg, sc, receipts.new("hook", "prompt-submit"))
    return hook.memory_items(ctx)


def reached(placed, evidence_ids: set, answer: "str | None") -> bool:
    """Evidence reaches the model when its memory is delivered whole, or cut/told with the
    answer inside what was delivered."""
    for p in placed:
        if p.item.key not in evidence_ids:
            continue
        if p.outcome == "whole":
            return True
        if p.outcome in ("cut", "tell") and answer and answer.lower() in p.text.lower():
            return True
    return False


def budget_curve(conn, maps: dict, convs: list, budgets=(500, 1000, 2000, 3000, 4000, 6000, 8000),
                 cfg: "dict | None" = None, max_results=(None, 20)) -> dict:
    """Share of answerable questions whose evidence reaches the model after packing, per budget.

    One series per max_results (None = the default setting); the floor is the default."""
    cfg = dict(cfg or settings.DEFAULTS)
    out = {}
    for mr in max_results:
        c = dict(cfg)
        if mr is not None:
            c["max_results"] = mr
        label = f"max_results={c['max_results']}"
        counts = {b: 0 for b in budgets}
        n = 0
        for conv in convs:
            sc = scope_for(conv)
            dia2id = {d: i for i, d in maps[conv.sample_id].items()}
            for q in conv.questions:
                if q.category not in ANSWERABLE:
                    continue
                n += 1
                items = prestep_items(conn, q.question, sc, c)
                ev = {f"m:{dia2id[d]}" for d in q.evidence}
                for b in budgets:
                    packed = packer.pack(items, hook.budget_for(_prompt_input(), {**c, "budget_chars": b}),
                                       int(c["item_cap_chars"]))
                    counts[b] += reached(packed.placed, ev, q.answer)
        out[label] = {str(b): round(counts[b] / n, 3) if n else None for b in budgets}
    return out


def _prompt_input():
    return payloads.HookInput(event="prompt-submit", agent_kind="claude", native_event=None,
                              session=None, cwd=None, act="prompt")


def abstention(asked: list, floors=(0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7),
               max_results: int = 5) -> dict:
    """At each floor: the share of unrelated questions (asked in another conversation's
    project) and of adversarial (cat 5) questions that would inject nothing, the
    share of answerable questions whose evidence is injected (above the floor, in the first
    max_results), and the precision of what is injected (share of injected memories that are
    evidence, answerable questions only)."""
    out = {}
    adv = [a for a in asked if a.category == 5]
    ans = [a for a in asked if a.category in ANSWERABLE]
    for f in floors:
        def injected(a):
            return [d for d, _, s in a.recalld if s >= f][:max_results]
        silent = sum(not injected(a) for a in adv)
        got = sum(hit_at(injected(a), a.evidence, max_results) for a in ans)
        inj = [(d, a) for a in ans for d in injected(a)]
        prec = sum(d in a.evidence for d, a in inj) / len(inj) if inj else None
        out[f"{f:.2f}"] = {
            "unrelated_silent": round(sum(a.unrelated_top < f for a in asked) / len(asked), 3) if asked else None,
            "adversarial_silent": round(silent / len(adv), 3) if adv else None,
            "answerable_injected": round(got / len(ans), 3) if ans else None,
            "answerable_silent": round(sum(not injected(a) for a in ans) / len(ans), 3) if ans else None,
            "precision": round(prec, 3) if prec is not None else None,
            "injected_per_question": round(len(inj) / len(ans), 2) if ans else None,
        }
    return out


def equal_error_floor(asked: list, max_results: int = 5) -> "float | None":
    """The floor (0.01 steps) where the share of unrelated questions that inject something
    equals the share of answerable questions whose evidence is not injected: the operating
    point of a detector with no reason to prefer one error over the other."""
    ans = [a for a in asked if a.category in ANSWERABLE]
    if not ans or not asked:
        return None
    best = None
    for i in range(101):
        f = i / 100
        leak = sum(a.unrelated_top >= f for a in asked) / len(asked)
        miss = sum(not hit_at([d for d, _, s in a.recalld if s >= f][:max_results], a.evidence, max_results)
                   for a in ans) / len(ans)
        gap = abs(leak - miss)
        if best is None or gap < best[0]:
            best = (gap, f)
    return best[1]


def latency(asked: list) -> dict:
    xs = [a.search_ms for a in asked]
    if not xs:
        return {}
    return {"search_p50_ms": round(statistics.median(xs), 3), "search_p99_ms": round(pct(xs, 0.99), 3)}


# --- the benchmark --------------------------------------------------------------------------

CATS = ["multi-hop", "temporal", "open-domain", "single-hop", "overall"]


def run(quick: bool = False, data=None) -> dict:
    asked, info = ask_all(data, DEFAULT_STYLE)
    q = quality(asked)
    out = {
        "data": info["path"], "style": info["style"], "conversations": info["conversations"],
        "memories": info["memories"], "questions": info["questions"],
        "dropped_no_evidence": info["dropped_no_evidence"],
        "side_by_side": {c: {"n": q["recalld"][c]["n"],
                             "recalld hit@1": q["recalld"][c]["hit@1"], "bm25 hit@1": q["baseline"][c]["hit@1"],
                             "recalld recall@5": q["recalld"][c]["recall@5"],
                             "bm25 recall@5": q["baseline"][c]["recall@5"]} for c in CATS},
        "recalld": q["recalld"], "baseline": q["baseline"],
        **latency(asked),
    }
    floor = float(settings.DEFAULTS["floor"])
    curve = abstention(asked)
    out["floor"] = floor
    out["abstention"] = curve
    at = curve.get(f"{floor:.2f}") or abstention(asked, floors=(floor,))[f"{floor:.2f}"]
    out["at_default_floor"] = at
    out["equal_error_floor"] = equal_error_floor(asked)
    if not quick:
        styles = {}
        for style in STYLES:
            a, _ = ask_all(data, style)
            s = quality(a)
            styles[style] = {"recalld hit@1": s["recalld"]["overall"]["hit@1"],
                             "recalld recall@5": s["recalld"]["overall"]["recall@5"],
                             "bm25 hit@1": s["baseline"]["overall"]["hit@1"],
                             "bm25 recall@5": s["baseline"]["overall"]["recall@5"]}
        out["styles"] = styles
        a, _ = ask_all(data, DEFAULT_STYLE, threads=False)
        s = quality(a)
        out["without_threads"] = {"recalld hit@1": s["recalld"]["overall"]["hit@1"],
                                  "recalld recall@5": s["recalld"]["overall"]["recall@5"],
                                  "bm25 hit@1": s["baseline"]["overall"]["hit@1"],
                                  "bm25 recall@5": s["baseline"]["overall"]["recall@5"]}
        # What threads add in each conversation: a split-level gain could hide one that loses.
        out["by_conversation"] = {}
        for sid in sorted({x.sample_id for x in asked}):
            with_, without = (summarize([x for x in qs if x.sample_id == sid])["overall"] for qs in (asked, a))
            out["by_conversation"][sid] = {"n": with_["n"], "hit@1": with_["hit@1"], "recall@5": with_["recall@5"],
                                           "without threads hit@1": without["hit@1"],
                                           "without threads recall@5": without["recall@5"]}
    out["plots"] = [
        {"file": "locomo_quality.png", "kind": "bar", "title": "LoCoMo recall: recalld pre-step vs FTS5 BM25",
         "x": CATS, "ylabel": "share of questions",
         "series": {"recalld hit@1": [q["recalld"][c]["hit@1"] for c in CATS],
                    "bm25 hit@1": [q["baseline"][c]["hit@1"] for c in CATS],
                    "recalld recall@5": [q["recalld"][c]["recall@5"] for c in CATS],
                    "bm25 recall@5": [q["baseline"][c]["recall@5"] for c in CATS]}},
        {"file": "locomo_floor.png", "kind": "line", "title": "Pre-step floor: abstention vs evidence injected",
         "x": [float(f) for f in curve], "xlabel": "floor (coverage score)", "ylabel": "share",
         "series": {"unrelated (other conversation) injecting nothing": [v["unrelated_silent"] for v in curve.values()],
                    "adversarial (cat 5) injecting nothing": [v["adversarial_silent"] for v in curve.values()],
                    "answerable: evidence injected": [v["answerable_injected"] for v in curve.values()],
                    "precision of injected memories": [v["precision"] for v in curve.values()]}},
    ]
    return out


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("locomo"))
