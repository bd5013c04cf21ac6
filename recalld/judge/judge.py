"""The judge: does any memory the search found actually answer the need?

A search rank cannot say "nothing": its top result is always something. The judge gives each
candidate the probability that it answers the need (recalld.judge.calibrated), a number that
means the same for every need, so one threshold (settings judge.threshold) decides what
passes, and when nothing answers, nothing passes.

The signals, all computed here in the background pass (never in the hook):

- the search's coverage score and ranking key (recalld.core.search), relative to the need's
  best candidate;
- whether the memory speaks of the subject the need names (calibrated.SUBJECT_FEATURES, from
  the texts alone), and, with the embedder, the candidate set as a whole: how much of the
  need's own words its best candidate holds and how far the cosines spread
  (calibrated.SET_FEATURES);
- for a turn of a conversation (calibrated.dialogue: it opens with its author's name, and the
  memory before or after it in its thread with another's; neighbours()): does it answer
  another's question, is it asked about (calibrated.THREAD_FEATURES); a turn is scored by the
  dialogue model;
- the embedder's cosine between the need and the memory (recalld.model.embed), when an
  embedder is installed;
- the small language model's query likelihood: how much the memory helps it predict the need
  (recalld.judge.scoring), and its gain on the need's words the memory does not hold
  (recalld.judge.rerank; kept in the receipt, not read by the probability), from one decode
  per candidate. It reads only the calibrated.LM_TOP candidates the cheap model (search +
  embedding) rates best: each decode is most of a pass's time, and reading more did not pass
  the right memory more often (docs/evaluation.md, "The judge's latency").

Of the candidates at or above the threshold, the first judge.max_pass (default 1) by
probability pass. The result says which signals were used (`signals`) and why one was missing
(`embed_error`).

When no language model is available the result says so (available=False, error=why) and
nothing passes: the judge never degrades to "inject everything".
"""

import time
from dataclasses import dataclass, field

from recalld.core.scope import Scope

try:  # before llama_cpp imports numpy: recalld.model.embed gives numpy one BLAS thread
    from recalld.model import embed as _embed
except ImportError:  # no numpy: the judge runs without the embedding signal
    _embed = None
from recalld.judge import calibrated, rerank
from recalld.model import runtime as llm
from recalld.model.errors import LLMError, Unavailable
from recalld.model.resolve import resolve

METHOD = "calibrated"


@dataclass
class Verdict:
    memory_id: int
    text: str
    search_score: float
    judge_score: "float | None"  # P(answers the need); None: the language model did not read it
    passed: bool
    # the candidate's signals (ql, gain, cos) and, where it was judged, its text and set features
    # (calibrated.detail_names)
    detail: dict = field(default_factory=dict)
    rank_score: "float | None" = None  # recalld.judge.rerank's ordering key (None: not scored)

    def as_dict(self) -> dict:
        return {"memory_id": self.memory_id, "text": self.text,
                "search_score": round(self.search_score, 4),
                "judge_score": None if self.judge_score is None else round(self.judge_score, 4),
                "rank_score": None if self.rank_score is None else round(self.rank_score, 4),
                "passed": self.passed, **({"detail": self.detail} if self.detail else {})}


@dataclass
class JudgeResult:
    need: str
    candidates: list
    passed: list
    model: "str | None"
    model_ms: float
    available: bool
    error: "str | None"
    threshold: float
    method: str = METHOD
    search_ms: float = 0.0
    load_ms: "float | None" = None  # set on the call that loaded the model
    # The candidates by probability, highest first (those the model read), as select() chose.
    ranked: list = field(default_factory=list)
    signals: list = field(default_factory=list)  # "search", "embedding", "lm": what the score read
    embedder: "str | None" = None
    embed_error: "str | None" = None  # why there is no embedding signal
    embed_ms: float = 0.0

    def as_dict(self) -> dict:
        return {"need": self.need, "method": self.method, "model": self.model,
                "available": self.available, "error": self.error, "threshold": self.threshold,
                "signals": self.signals, "embedder": self.embedder, "embed_error": self.embed_error,
                "model_ms": round(self.model_ms, 1), "embed_ms": round(self.embed_ms, 1),
                "search_ms": round(self.search_ms, 1),
                "load_ms": None if self.load_ms is None else round(self.load_ms, 1),
                "candidates": [v.as_dict() for v in self.candidates],
                "passed": [v.memory_id for v in self.passed]}


def select(cands: list, threshold: float, max_pass: int) -> list:
    """What passes: of `cands`, given highest probability first, those at or above the
    threshold, at most max_pass of them. Passing only the best one is the default: the
    runner-up above a threshold was more often a near miss than a second answer
    (docs/judge.md)."""
    above = [v for v in cands if v.judge_score is not None and v.judge_score >= threshold]
    return above[: max(0, max_pass)]


def signals(hits: list, embedded: "list | None", ranked: "list | None", threads: "dict | None" = None) -> list:
    """The per-candidate signal dicts calibrated.features reads, in search order: `embedded`
    the cosines (or None), `ranked` recalld.judge.rerank's results for the candidates the
    model read (or None), `threads` {memory id: (the text before it in its thread, the text
    after it)} (neighbours())."""
    by_id = {r.hit.id: r for r in ranked or ()}
    out = []
    for i, h in enumerate(hits):
        r = by_id.get(h.id)
        prev, nxt = (threads or {}).get(h.id, (None, None))
        out.append({"id": h.id, "score": h.score, "rank": h.rank, "text": h.text,
                    "ql": None if r is None else r.ql, "unm": None if r is None else r.gain,
                    "cos": None if embedded is None else embedded[i], "prev_text": prev, "next_text": nxt})
    return out


def neighbours(conn, ids: list, scope: Scope) -> dict:
    """{memory id: (the text of the memory it follows in its thread, the text of the first one
    that follows it)}, each None where there is none this scope may read (the one resolver's
    rule: current memories of this caller's scope). Only ids in a thread are keys. A store
    without threads pays one index probe."""
    import sqlite3

    if not ids:
        return {}
    try:
        if conn.execute("SELECT 1 FROM memories WHERE follows IS NOT NULL LIMIT 1").fetchone() is None:
            return {}
        where, params = scope.where("m")
        marks = ",".join("?" * len(ids))
        prev = dict(conn.execute(f"SELECT c.id, m.text FROM memories c JOIN memories m ON m.id = c.follows "
                                 f"WHERE c.id IN ({marks}) AND {where}", (*ids, *params)).fetchall())
        nxt = {}
        for f, text in conn.execute(f"SELECT m.follows, m.text FROM memories m WHERE m.follows IN ({marks}) "
                                    f"AND {where} ORDER BY m.id", (*ids, *params)):
            nxt.setdefault(f, text)
    except sqlite3.Error:
        return {}
    return {i: (prev.get(i), nxt.get(i)) for i in ids if i in prev or i in nxt}


def decide(cands: list, embed: bool, threshold: float, max_pass: int, models: "dict | None" = None,
           need: str = "") -> tuple:
    """(probabilities in search order, indexes highest probability first, indexes that pass)
    for signal dicts whose language-model fields are set for the candidates the model read;
    `need` for the subject features (calibrated.SUBJECT_FEATURES)."""
    ps = calibrated.probabilities(cands, True, embed, models, need)
    order = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: (-ps[i], i))
    passed = [i for i in order if ps[i] >= threshold][: max(0, max_pass)]
    return ps, order, passed


def cosines(encoder, need: str, hits: list, conn=None) -> list:
    """cos(need, memory) for each hit (the embedder's rows are unit length). A memory's vector
    is read from the store when the embedding pass (recalld.daemon.embedder) has written one of
    this encoder's model; the rest are embedded here, with the need, in one batch."""
    stored = _stored_vectors(conn, encoder.model, [h.id for h in hits]) if conn is not None else {}
    todo = [h.text for h in hits if h.id not in stored]
    vecs = encoder.embed([need] + todo)
    q, fresh = vecs[0], iter(vecs[1:])
    return [float((stored[h.id] if h.id in stored else next(fresh)) @ q) for h in hits]


def _stored_vectors(conn, model: str, ids: list) -> dict:
    """{memory id: vector} of `model` for `ids`; empty on a store without the vectors table."""
    import sqlite3

    try:
        from recalld.model import vectors
    except ImportError:
        return {}
    try:
        rows = conn.execute(f"SELECT memory_id, vec FROM memory_vectors WHERE model = ? AND memory_id IN "
                            f"({','.join('?' * len(ids))})", (model, *ids)).fetchall()
    except sqlite3.Error:
        return {}
    return {r[0]: vectors.from_blob(r[1]) for r in rows}


def load_embedder(cfg: dict):
    """(the configured encoder, None) or (None, why there is none)."""
    if _embed is None:
        return None, "the embedder needs numpy, which is not installed"
    try:
        return _embed.require(cfg), None
    except (Unavailable, LLMError) as e:
        return None, str(e)


def judge_need(conn, need: str, scope: Scope, cfg: dict, runtime=None, encoder=None, *,
               lm_top: "int | None" = None) -> JudgeResult:
    """Search -> top judge.max_candidates -> embedding cosines (when an embedder is there) ->
    the language model on the lm_top (default calibrated.LM_TOP) the cheap model rates best ->
    a probability per candidate -> the first judge.max_pass at or above judge.threshold.
    `candidates` stay in search order. `encoder=False` runs without the embedder."""
    from recalld.core.search import search

    jcfg = cfg.get("judge") or {}
    threshold = float(jcfg.get("threshold", 0.5))
    k = int(jcfg.get("max_candidates", 5))
    max_pass = int(jcfg.get("max_pass", 1))
    timeout_s = float(jcfg.get("timeout_s", 20))
    lm_top = calibrated.LM_TOP if lm_top is None else lm_top
    t0 = time.perf_counter()
    hits = search(conn, need, scope, limit=k, floor=0.0) if need and need.strip() else []
    search_ms = (time.perf_counter() - t0) * 1000
    cands = [Verdict(h.id, h.text, h.score, None, False) for h in hits]
    res = JudgeResult(need=need, candidates=cands, passed=[], model=None, model_ms=0.0,
                      available=False, error=None, threshold=threshold, search_ms=search_ms)

    load_ms = None
    if runtime is None:
        if not cands:
            # Nothing to judge: say whether a judge would be there without loading it.
            choice = resolve("judge", cfg)
            res.available, res.error = choice.available, choice.reason
            res.model = choice.path and choice.path.rsplit("/", 1)[-1]
            return res
        first = not llm.loaded()
        try:
            runtime = llm.require_runtime("judge", cfg)
        except Unavailable as e:
            res.error = str(e)
            return res
        if first:
            load_ms = runtime.load_ms
    res.available, res.model, res.load_ms = True, runtime.name, load_ms
    if not cands:
        return res

    deadline = time.monotonic() + timeout_s
    res.signals = ["search"]
    cos = None
    if encoder is None:
        encoder, res.embed_error = load_embedder(cfg)
    elif encoder is False:
        encoder, res.embed_error = None, "not used for this run"
    if encoder is not None:
        t1 = time.perf_counter()
        try:
            cos = cosines(encoder, " ".join(need.split()), hits, conn)
            res.embedder = encoder.model
            res.signals.append("embedding")
        except Exception as e:  # a broken embedder costs the signal, never the pass
            res.embed_error = f"embedding failed: {type(e).__name__}: {e}"[:300]
        res.embed_ms = (time.perf_counter() - t1) * 1000
    embed = cos is not None
    threads = neighbours(conn, [h.id for h in hits], scope)
    picks = calibrated.lm_picks(signals(hits, cos, None, threads), embed, lm_top, need=need)
    ms0 = runtime.model_ms
    try:
        # One decode per candidate gives both its query likelihood and its re-ranking gain.
        ranked = rerank.rerank(runtime, need, [hits[i] for i in picks], deadline=deadline)
    except LLMError as e:
        ranked, res.error = [], f"judge failed: {e}"
    res.model_ms = runtime.model_ms - ms0
    if any(r.ql is not None for r in ranked):
        res.signals.append("lm")
    sig = signals(hits, cos, ranked, threads)
    ps, order, passed = decide(sig, embed, threshold, max_pass, need=need)
    xs = calibrated.features(sig, True, embed, need)
    by_id = {r.hit.id: r for r in ranked}
    for i, v in enumerate(cands):
        r = by_id.get(v.memory_id)
        v.judge_score = None if ps[i] is None else round(ps[i], 4)
        v.rank_score = None if r is None or r.rank_score is None else round(r.rank_score, 4)
        v.detail = {k: round(x, 4) for k, x in (("ql", sig[i]["ql"]), ("gain", sig[i]["unm"]),
                                                ("cos", sig[i]["cos"])) if x is not None}
        if xs[i] is not None:  # what the texts said, for a candidate the probability was read for
            v.detail.update({k: round(xs[i][k], 3) for k in calibrated.detail_names(embed)})
            if calibrated.dialogue(sig[i]):  # a turn of a conversation: the dialogue model scored it
                v.detail["turn"] = 1
                v.detail.update({k: round(xs[i][k], 3) for k in calibrated.THREAD_FEATURES})
    res.ranked = [cands[i] for i in order]
    for i in passed:
        cands[i].passed = True
    unscored = sum(r.ql is None for r in ranked)
    if unscored and res.error is None:
        res.error = f"judge timed out after {timeout_s:g} s; {unscored} of {len(ranked)} candidates unjudged"
    res.passed = [cands[i] for i in passed]
    return res
