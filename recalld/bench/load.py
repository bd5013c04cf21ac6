"""Hooks under load: N concurrent agent sessions, each running a realistic mix of hook events as
real processes for a bounded time, against one store of 10k memories.

    python3 -m recalld.bench.load [--clients 30] [--seconds 30] [--memories 10000] [--trace] [--daemon] [--json]

Each client is one Claude Code session: `session-start`, then turns of `prompt-submit`, one to
four tool calls (`pre-tool` and `post-tool` for Bash, Edit or Read) and `stop`, back to back,
until the time is up (the run under way finishes). Every run is the installed hook process
(the launcher `recalld install` writes, `<python> -I -S .../recalld/hook/__main__.py hook
EVENT`, byte-compiled as installed), timed from spawn to exit. Reported per
event: runs, whole-process p50/p99, the receipts' own duration p50/p99, timeouts (receipts
with outcome `timeout`: the hook's deadline, default 300 ms, cut the run), errors, receipts
that went to the fallback file, and runs without a receipt (must be 0).

With --daemon a `recalld daemon run` is up for the whole run (judge and proposer off: there are
no transcripts to judge), so the hook processes hand their runs to it (recalld/hook/served.py);
the report then counts how many it served (`served`) and why the others ran in-process.

With --trace every client runs the same hook through recalld.bench.hooktrace, which times its
parts (lock waits, commits, checkpoints, connect, each source, autostart, the receipt) and the
report adds, for the slowest tenth of runs and for the timed-out ones, the median milliseconds
of each part and of the process start (whole-process time minus the traced run).
"""

import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from recalld.bench import synth
from recalld.bench.common import ServingDaemon, child_env, load_average, pct, restore_home

TOOLS = (
    ("Bash", lambda r, comp: {"command": r.choice([f"pytest -x -k {comp}", "git status", f"rg {comp} src/",
                                                   f"python -m {comp}.cli --dry-run", "make lint"])},
     lambda r: {"stdout": "ok\n" * r.randint(1, 40), "stderr": "", "exit_code": r.choice([0, 0, 0, 1])}),
    ("Edit", lambda r, comp: {"file_path": f"src/{comp}/models_{r.randint(1, 99)}.py", "old_string": "x = 1",
                              "new_string": "x = 2"},
     lambda r: {"success": True}),
    ("Read", lambda r, comp: {"file_path": f"src/{comp}/api_{r.randint(1, 99)}.py"},
     lambda r: {"content": "def f():\n    return 1\n" * r.randint(1, 30)}),
)


def hook_command(event: str, trace: bool) -> list:
    """What `recalld install` writes for this interpreter: the launcher, `-I -S`."""
    if trace:
        return [sys.executable, "-m", "recalld.bench.hooktrace", event]
    from recalld.install.entries import LAUNCHER

    return [sys.executable, "-I", "-S", LAUNCHER, "hook", event]


def session_events(r: random.Random, session: str, cwd: str, prompts: list):
    """(event, payload) for one session, forever: the caller stops when its time is up."""
    base = {"session_id": session, "transcript_path": f"/tmp/{session}.jsonl", "cwd": cwd}
    yield "session-start", dict(base, hook_event_name="SessionStart", source="startup")
    while True:
        comp = r.choice(synth.COMPONENTS)
        yield "prompt-submit", dict(base, hook_event_name="UserPromptSubmit", prompt=r.choice(prompts))
        for _ in range(r.randint(1, 4)):
            name, make_input, make_response = r.choice(TOOLS)
            tool_input = make_input(r, comp)
            yield "pre-tool", dict(base, hook_event_name="PreToolUse", tool_name=name, tool_input=tool_input)
            yield "post-tool", dict(base, hook_event_name="PostToolUse", tool_name=name, tool_input=tool_input,
                                    tool_response=make_response(r))
        yield "stop", dict(base, hook_event_name="Stop", stop_hook_active=False,
                           last_assistant_message=f"Done: the {comp} change is in and the tests pass. "
                                                  + r.choice(prompts))


def _client(i: int, cwd: str, env: dict, prompts: list, trace: bool, start: threading.Barrier,
            stop_at: list, out: list) -> None:
    r = random.Random(1000 + i)
    start.wait()
    for event, body in session_events(r, f"load-{i:03d}", cwd, prompts):
        if time.monotonic() >= stop_at[0]:
            return
        t = time.perf_counter()
        res = subprocess.run(hook_command(event, trace), input=json.dumps(body).encode(), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        out.append({"event": event, "session": body["session_id"], "wall_ms": (time.perf_counter() - t) * 1000,
                    "rc": res.returncode})


def _ms(values, q):
    v = pct(values, q)
    return None if v is None else round(v, 1)


def run(quick: bool = False, clients: int = 30, seconds: float = 30.0, memories: int = 10_000,
        trace: bool = False, keep: "str | None" = None, daemon: bool = False) -> dict:
    saved = os.environ.get("RECALLD_HOME")
    try:
        return _run(quick, clients, seconds, memories, trace, keep, daemon)
    finally:
        restore_home(saved)


def _run(quick, clients, seconds, memories, trace, keep, daemon=False) -> dict:
    from recalld.bench.scale import build_store
    from recalld.install.plan import ensure_bytecode

    if quick:
        clients, seconds, memories = min(clients, 8), min(seconds, 8.0), min(memories, 2000)
    tmp = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="recalld-bench-load-"))
    tmp.mkdir(parents=True, exist_ok=True)
    project = tmp / "project"
    project.mkdir(exist_ok=True)
    home = tmp / "home"
    try:
        bytecode = ensure_bytecode()
        build_s = build_store(home, memories, str(project))
        trace_file = tmp / "trace.jsonl"
        env = child_env(RECALLD_HOME=str(home), RECALLD_HOOK_TRACE=str(trace_file))
        env.pop("RECALLD_AGENT", None)
        prompts = synth.prompts(200)
        runs: list = []
        start = threading.Barrier(clients + 1)
        stop_at = [0.0]
        threads = [threading.Thread(target=_client, args=(i, str(project), env, prompts, trace, start, stop_at, runs),
                                    daemon=True) for i in range(clients)]
        serving = contextlib.nullcontext()
        if daemon:  # it serves the hooks (recalld/hook/served.py); no judge: no transcripts here to judge
            (home / "settings.json").write_text(json.dumps({"models": {"judge": "off"}, "proposals": {"enabled": False}}))
            serving = ServingDaemon([sys.executable, "-m", "recalld", "daemon", "run"], env, home)
        with serving:
            for t in threads:
                t.start()
            load_before = load_average()
            stop_at[0] = time.monotonic() + seconds
            start.wait()
            t0 = time.monotonic()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
        result = {"clients": clients, "seconds": seconds, "elapsed_s": round(elapsed, 1), "memories": memories,
                  "trace": trace, "daemon": daemon, "store_build_s": round(build_s, 1), "bytecode": bytecode,
                  "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                  "load_average_before": load_before, "load_average_after": load_average()}
        result.update(summarize(runs, home))
        if trace:
            result["waits"] = waits(runs, trace_file)
        return result
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _receipts(home: Path) -> list:
    import sqlite3

    conn = sqlite3.connect(f"file:{home / 'recalld.db'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        # The store is the probe's own: every hook receipt in it is one of its runs (a run cut
        # by the deadline before it read its payload has no session).
        rows = [dict(r) for r in conn.execute(
            "SELECT hook, session, outcome, error, duration_ms, json_extract(detail, '$.served') AS served "
            "FROM receipts WHERE source = 'hook'")]
    finally:
        conn.close()
    for line in _lines(home / "receipts-fallback.jsonl"):
        if line.get("source") == "hook":
            rows.append({**{k: line.get(k) for k in ("hook", "session", "outcome", "error", "duration_ms")},
                         "served": (line.get("detail") or {}).get("served"),
                         "fallback": (line.get("detail") or {}).get("fallback_reason") or "?"})
    return rows


def _lines(path: Path) -> list:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def summarize(runs: list, home: Path) -> dict:
    recs = _receipts(home)
    events = sorted({r["event"] for r in runs}, key=lambda e: [r["event"] for r in runs].index(e))
    per = {}
    for ev in events + ["all"]:
        mine = [r for r in runs if ev == "all" or r["event"] == ev]
        rr = [x for x in recs if ev == "all" or x["hook"] == ev]
        walls = [r["wall_ms"] for r in mine]
        durs = [x["duration_ms"] for x in rr if x.get("duration_ms") is not None]
        outcomes: dict = {}
        for x in rr:
            outcomes[x["outcome"]] = outcomes.get(x["outcome"], 0) + 1
        timeouts = outcomes.get("timeout", 0)
        served: dict = {}
        for x in rr:
            served[x.get("served") or "in-process"] = served.get(x.get("served") or "in-process", 0) + 1
        per[ev] = {
            "runs": len(mine), "wall_p50_ms": _ms(walls, 0.5), "wall_p99_ms": _ms(walls, 0.99),
            "receipt_p50_ms": _ms(durs, 0.5), "receipt_p99_ms": _ms(durs, 0.99),
            "timeouts": timeouts, "timeout_share": round(timeouts / len(mine), 3) if mine else None,
            "errors": outcomes.get("error", 0), "fallback_receipts": sum(1 for x in rr if x.get("fallback")),
            "missing_receipts": len(mine) - len(rr), "nonzero_exit": sum(1 for r in mine if r["rc"] != 0),
            "outcomes": outcomes, "served": served,
        }
    errors: dict = {}
    fallback: dict = {}
    for x in recs:
        if x.get("error") and x["outcome"] in ("error", "timeout"):
            errors[x["error"]] = errors.get(x["error"], 0) + 1
        if x.get("fallback"):
            fallback[x["fallback"]] = fallback.get(x["fallback"], 0) + 1
    return {"per_event": per, "errors_seen": errors, "fallback_reasons": fallback}


PARTS_ORDER = ("start", "import", "settings", "scope", "connect", "src:crystal_items", "src:queue_items",
               "src:memory_items", "src:always_items", "src:proposal_items", "stop_boundary", "autostart",
               "lazy_import", "receipt", "sql:begin", "sql:commit", "sql:insert", "sql:select", "sql:pragma")


def waits(runs: list, trace_file: Path) -> dict:
    """What the slow runs spent their time on: traced parts, matched to the client's wall time
    in order per (session, event)."""
    traces: dict = {}
    for t in _lines(trace_file):
        traces.setdefault((t.get("session"), t.get("event")), []).append(t)
    joined = []
    seen: dict = {}
    for r in runs:
        key = (r["session"], r["event"])
        k = seen.get(key, 0)
        seen[key] = k + 1
        lst = traces.get(key) or []
        if k < len(lst):  # a client runs its hooks one at a time: the k-th trace is its k-th run
            joined.append((r, lst[k]))
    if not joined:
        return {"traced_runs": 0}

    def parts(r, t) -> dict:
        p = {"start": max(0.0, r["wall_ms"] - t["import_ms"] - t["run_ms"]), "import": t["import_ms"],
             "run": t["run_ms"]}
        p.update(t["spans"])
        p.update({f"sql:{k}": v for k, v in t["sql"].items()})
        return p

    def profile(rows) -> dict:
        if not rows:
            return {"runs": 0}
        ps = [parts(r, t) for r, t in rows]
        keys = [k for k in PARTS_ORDER + ("run",) if any(k in p for p in ps)]
        return {"runs": len(rows),
                "wall_median_ms": round(statistics.median(r["wall_ms"] for r, _ in rows), 1),
                "median_ms": {k: round(statistics.median(p.get(k, 0.0) for p in ps), 1) for k in keys},
                "mean_ms": {k: round(statistics.fmean(p.get(k, 0.0) for p in ps), 1) for k in keys},
                "lazy_imports_mean_ms": _mean_by_key([t.get("imports") or {} for _, t in rows]),
                "checkpoints": sum(t.get("checkpoints", 0) for _, t in rows),
                "begin_busy": sum(t.get("begin_busy", 0) for _, t in rows)}

    walls = sorted(r["wall_ms"] for r, _ in joined)
    cut = walls[int(0.9 * (len(walls) - 1))]
    out = {"traced_runs": len(joined),
           "all": profile(joined),
           "slowest_tenth": profile([(r, t) for r, t in joined if r["wall_ms"] >= cut]),
           "timed_out": profile([(r, t) for r, t in joined if t.get("outcome") == "timeout"])}
    by_event = {}
    for ev in sorted({r["event"] for r, _ in joined}):
        rows = [(r, t) for r, t in joined if r["event"] == ev]
        p = profile(rows)
        by_event[ev] = {"runs": p["runs"], "median_ms": p["median_ms"]}
    out["by_event"] = by_event
    return out


def _mean_by_key(dicts: list) -> dict:
    """{key: mean over all dicts, 0 where a dict lacks it}, largest first."""
    keys = {k for d in dicts for k in d}
    means = {k: round(sum(d.get(k, 0.0) for d in dicts) / len(dicts), 1) for k in keys} if dicts else {}
    return dict(sorted(means.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("load", options=(
        ("--clients", {"type": int, "default": 30, "dest": "clients", "help": "concurrent sessions (30)"}),
        ("--seconds", {"type": float, "default": 30.0, "dest": "seconds", "help": "how long they run (30)"}),
        ("--memories", {"type": int, "default": 10_000, "dest": "memories", "help": "store size (10000)"}),
        ("--trace", {"action": "store_true", "dest": "trace", "help": "time each run's parts (hooktrace)"}),
        ("--keep", {"default": None, "dest": "keep", "help": "build and keep the store and trace here"}),
        ("--daemon", {"action": "store_true", "dest": "daemon",
                      "help": "with `recalld daemon run` up, serving the hooks (default: no daemon)"}),
    )))
