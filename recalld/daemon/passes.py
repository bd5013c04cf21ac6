"""The background pass's parts that need no daemon state: the judge's thread, the time limit,
the receipt, and the transaction that queues what passed.

`Daemon.run_pass` (recalld.daemon.service) puts them together: need -> judge (on the
JudgeWorker, waited on for `time_limit`) -> `new_for_session` -> `commit_pass`, which writes
the queue rows and exactly one receipt.
"""

import hashlib
import os
import queue
import threading
from datetime import datetime, timedelta, timezone

from recalld.core import receipts, scope


class _Job:
    def __init__(self, fn):
        self.fn = fn
        self.done = threading.Event()
        self.result = None
        self.error: "BaseException | None" = None


class JudgeWorker:
    """One thread that runs judge calls; callers wait with a time limit."""

    def __init__(self):
        self.q: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="recalld-judge", daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            job = self.q.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as e:
                job.error = e
            finally:
                job.done.set()

    def submit(self, fn) -> _Job:
        job = _Job(fn)
        self.q.put(job)
        return job

    def stop(self, wait_s: float = 10.0) -> bool:
        self.q.put(None)
        self.thread.join(wait_s)
        return not self.thread.is_alive()


def session_scope(conn, need, project: str) -> scope.Scope:
    """The scope this session's own hooks resolved (core.scope, the one resolver). Who the agent
    is (RECALLD_AGENT, a subagent's type) lives in its environment and hook payloads, not in
    its transcript, so the session's hook receipts name it: a main transcript takes its main
    agent's latest, a subagent's transcript its subagents' latest. Before any hook ran:
    "main", or an unnamed subagent (which can only narrow what it reads)."""
    sub = bool(need.agent) and need.agent != scope.MAIN
    rows = conn.execute("SELECT agent FROM receipts WHERE session = ? AND source = 'hook' AND project IS ? "
                        "AND agent IS NOT NULL ORDER BY id DESC LIMIT 100", (need.session, project)).fetchall()
    for (agent,) in rows:
        if ("/" in agent) == sub:
            return scope.Scope(project=project, agent=agent)
    return scope.Scope(project=project, agent=scope.subagent_identity(scope.MAIN, None) if sub else scope.MAIN)


class PassTimeout(Exception):
    pass


def new_receipt(need) -> dict:
    """The pass's receipt before the judge runs: who, where, and what triggered it (a hash of
    the need, never its text)."""
    r = receipts.new("daemon", "need")
    r["act"] = "need"
    r["session"], r["agent"] = need.session, need.agent
    r["project"] = need.project or (scope.resolve_project(need.cwd) if need.cwd else None)
    r["detail"] = {"trigger": need.triggers, "need_chars": len(need.query),
                   "need_sha256": hashlib.sha256(need.query.encode("utf-8", "replace")).hexdigest(),
                   "window_events": need.events, "line_no": need.line_no,
                   "transcript": os.path.basename(need.source or "")}
    return r


def time_limit(cfg: dict, model_loaded: bool) -> float:
    """How long a pass waits for its verdict. The judge enforces judge.timeout_s on the model
    itself; this bounds search + model + slack, plus the model's load on the first pass."""
    t = float((cfg.get("judge") or {}).get("timeout_s", 20))
    limit = t + max(1.0, 0.25 * t)
    if not model_loaded:
        limit += float((cfg.get("daemon") or {}).get("load_allowance_s", 60))
    return limit


def fill_from_result(r: dict, res) -> None:
    """The judge's result, as the receipt's counts and detail (ids and scores, no text)."""
    cands = list(getattr(res, "candidates", []) or [])
    passed = list(getattr(res, "passed", []) or [])
    r["candidates"] = len(cands)
    r["above_floor"] = len(passed)
    r["detail"].update({
        "candidates": [{"id": v.memory_id, "search_score": round(float(v.search_score), 4),
                        "judge_score": v.judge_score, "rank_score": getattr(v, "rank_score", None),
                        "passed": bool(v.passed)} for v in cands],
        "threshold": getattr(res, "threshold", None),
        "model": getattr(res, "model", None),
        "model_ms": round(float(getattr(res, "model_ms", 0.0) or 0.0), 1),
        "search_ms": round(float(getattr(res, "search_ms", 0.0) or 0.0), 1),
        "embed_ms": round(float(getattr(res, "embed_ms", 0.0) or 0.0), 1),
        "judge_available": bool(getattr(res, "available", False)),
        "method": getattr(res, "method", None),
        # which signals the judge's probabilities read, and why the embedding was missing
        "signals": list(getattr(res, "signals", None) or []),
        "embedder": getattr(res, "embedder", None),
        "embed_error": getattr(res, "embed_error", None),
    })
    for c, v in zip(r["detail"]["candidates"], cands):
        if getattr(v, "detail", None):
            c["signals"] = dict(v.detail)  # ql, gain, cos and the text features: numbers, no text
    if getattr(res, "load_ms", None) is not None:
        r["detail"]["load_ms"] = round(res.load_ms, 1)


def middle_band(res, cfg: dict) -> list:
    """The verdicts below the judge's threshold but at or above tells.judge_floor, most probable
    first, at most tells.max: queued as tells (one line the agent opens when it matters), where
    the judge cannot be sure enough to spend the whole text."""
    t = cfg.get("tells") or {}
    low, n = float(t.get("judge_floor", 2.0)), int(t.get("max", 0))
    threshold = getattr(res, "threshold", None)
    if n <= 0 or threshold is None:
        return []
    band = [v for v in getattr(res, "candidates", None) or [] if not v.passed and v.judge_score is not None
            and low <= v.judge_score < threshold]
    return sorted(band, key=lambda v: -v.judge_score)[:n]


def new_for_session(conn, session: str, passed: list) -> tuple:
    """Passed verdicts not already queued for this session (one memory is injected once)."""
    rows, already = [], []
    for v in passed:
        hit = conn.execute("SELECT 1 FROM queue WHERE session = ? AND memory_id = ? LIMIT 1",
                           (session, v.memory_id)).fetchone()
        if hit:
            already.append(v.memory_id)
        else:
            rows.append(v)
    return rows, already


def commit_pass(conn, r: dict, rows: list, cfg: dict) -> str:
    """Queue the passed rows and append the pass's receipt in one transaction. Returns where
    the receipt went: "db", "fallback" (the JSONL file, nothing queued) or "lost"."""
    minutes = float((cfg.get("queue") or {}).get("expire_minutes", 30))
    now = datetime.now(timezone.utc)
    expires = (now + timedelta(minutes=minutes)).isoformat(timespec="microseconds")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            queued = []
            for v in rows:
                tier = "whole" if v.passed else "tell"  # not passed: the middle band (middle_band)
                cur = conn.execute(
                    "INSERT INTO queue (time, session, memory_id, score, receipt_uid, expires_at, tier) "
                    "VALUES (?,?,?,?,?,?,?)", (r["time"], r["session"], v.memory_id, v.judge_score, r["uid"], expires, tier))
                queued.append({"queue_id": cur.lastrowid, "memory_id": v.memory_id,
                               "judge_score": v.judge_score, "tier": tier})
            r["detail"]["queued"] = queued
            receipts.insert(conn, r)
            conn.execute("COMMIT")
            return "db"
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"[:200]
        r["detail"]["queued"] = []
        if r["outcome"] == "injected":
            r["outcome"], r["error"] = "error", f"queue_write_failed: {reason}"
        try:
            receipts.append_fallback(r, reason)
            return "fallback"
        except OSError:
            return "lost"
