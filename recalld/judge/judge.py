"""The judge: does any memory the search found actually answer the need?

A search rank cannot say "nothing": its top result is always something. The judge gives each
candidate a score that means the same thing for every need, so one threshold (settings
judge.threshold, calibrated on development data, see docs/judge.md) decides what passes, and
when nothing answers, nothing passes.

The score is query likelihood, measured as how much the memory helps a small language model
predict the need (recalld.judge.scoring):

    judge_score = (log P(need | memory) - log P(need | no memory)) / tokens in the need

Of the candidates at or above the threshold, the first judge.max_pass (default 1) in re-ranked
order pass (recalld.judge.rerank: the search's ranking key plus the model's gain on the need's
words the memory does not hold, from the same decode).

When no model is available the result says so (available=False, error=why) and nothing
passes: the judge never degrades to "inject everything".
"""

import time
from dataclasses import dataclass, field

from recalld.core.scope import Scope
from recalld.judge import rerank
from recalld.model import runtime as llm
from recalld.model.errors import LLMError, Unavailable
from recalld.model.resolve import resolve

METHOD = "query-likelihood"


@dataclass
class Verdict:
    memory_id: int
    text: str
    search_score: float
    judge_score: "float | None"
    passed: bool
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
    # The candidates in the re-ranked order select() chose from (recalld.bench.judge applies
    # select() to it at other thresholds).
    ranked: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"need": self.need, "method": self.method, "model": self.model,
                "available": self.available, "error": self.error, "threshold": self.threshold,
                "model_ms": round(self.model_ms, 1), "search_ms": round(self.search_ms, 1),
                "load_ms": None if self.load_ms is None else round(self.load_ms, 1),
                "candidates": [v.as_dict() for v in self.candidates],
                "passed": [v.memory_id for v in self.passed]}


def select(cands: list, threshold: float, max_pass: int) -> list:
    """What passes: of `cands`, given in re-ranked order (recalld.judge.rerank), those at or above
    the threshold, at most max_pass of them. The judge score gates; the re-ranked order (the
    search's ranking key plus the model's gain on the words the memory lacks) chooses. Measured
    on LoCoMo dev (docs/judge.md): passing only one raised the precision of what is injected
    from 0.27 to 0.49 at the same threshold band, and ordering by the judge score itself chose
    worse than the search order (precision 0.456 against 0.478 at 1.3, 150 questions)."""
    above = [v for v in cands if v.judge_score is not None and v.judge_score >= threshold]
    return above[: max(0, max_pass)]


def judge_need(conn, need: str, scope: Scope, cfg: dict, runtime=None) -> JudgeResult:
    """Search -> top judge.max_candidates -> judge and re-rank each -> pass the first
    judge.max_pass of those at or above judge.threshold, in re-ranked order. `candidates` stay
    in search order; each carries its `rank_score`."""
    from recalld.core.search import search

    jcfg = cfg.get("judge") or {}
    threshold = float(jcfg.get("threshold", 0.0))
    k = int(jcfg.get("max_candidates", 5))
    max_pass = int(jcfg.get("max_pass", 1))
    timeout_s = float(jcfg.get("timeout_s", 20))
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
    ms0 = runtime.model_ms
    try:
        # One decode per candidate gives both its judge score and its re-ranking key.
        ranked = rerank.rerank(runtime, need, hits, top=len(hits), deadline=deadline)
    except LLMError as e:
        ranked, res.error = [rerank.Ranked(h, None, None) for h in hits], f"judge failed: {e}"
    res.model_ms = runtime.model_ms - ms0
    by_id = {v.memory_id: v for v in cands}
    for r in ranked:
        v = by_id[r.hit.id]
        v.judge_score = None if r.ql is None else round(r.ql, 4)
        v.rank_score = None if r.rank_score is None else round(r.rank_score, 4)
    res.ranked = [by_id[r.hit.id] for r in ranked]
    for v in select(res.ranked, threshold, max_pass):
        v.passed = True
    unscored = sum(v.judge_score is None for v in cands)
    if unscored and res.error is None:
        res.error = f"judge timed out after {timeout_s:g} s; {unscored} of {len(cands)} candidates unjudged"
    res.passed = [v for v in cands if v.passed]
    return res
