"""The hook's own cost on a user-style install.

Creates a fresh venv, installs the project into it the way the README does (`pip install
<checkout>`, not editable), installs the hooks into a throwaway HOME with that venv's
`recalld install claude-code` and times each hook event through the very command it wrote,
as whole processes, against the same venv's bare interpreter (`python -I -S -c pass`, as the
launcher starts), interleaved
(recalld.bench.common.interleaved), at 1, 10k and 100k memories. Pre-tool runs in a project
with 300 trusted crystals (recalld.bench.crystals.generate). Per event it reports p50/p99,
the ratio to bare, the hook's own cost (hook minus bare), the CPU time (user + system) of each
process (other work on the machine distorts it far less than wall time), and a profile of where
the time goes: the `-X importtime` tree summarised (total, the heaviest modules by self time, and the
usual suspects by cumulative time) and the hook's phases and SQL from recalld.bench.hooktrace.

    python3 -m recalld.bench.hookcost [--quick] [--venv DIR] [--keep DIR] [--json]

--venv reuses (or creates there) the venv instead of a temporary one: `pip install` takes
minutes; --keep keeps the stores (built once per size, reused by later runs with --keep).
"""

import json
import os
import random
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recalld.bench import crystals as bench_crystals
from recalld.bench import synth
from recalld.bench.common import ServingDaemon, Unavailable, interleaved, load_average, pct, source_root

EVENTS = ("session-start", "prompt-submit", "pre-tool", "post-tool", "stop")
NATIVE = {"session-start": "SessionStart", "prompt-submit": "UserPromptSubmit", "pre-tool": "PreToolUse",
          "post-tool": "PostToolUse", "stop": "Stop"}
SIZES = (1, 10_000, 100_000)
# Modules whose cumulative import time the profile always shows: the ones the hook's cost hinges on.
WATCH = ("json", "re", "enum", "sqlite3", "_sqlite3", "datetime", "math", "copy", "recalld.agents",
         "recalld.crystals", "recalld.core.search", "recalld.core.settings", "recalld.hook.run",
         "recalld.hook.crystal_source", "recalld.hook.proposal_source", "site", "runpy")


def _venv(where: "Path | None", tmp: Path) -> tuple:
    """(venv dir, seconds `pip install` took or None when reused)."""
    root = source_root()
    if root is None:
        raise Unavailable("needs the source checkout (it installs it into a fresh venv)")
    venv = where or tmp / "venv"
    py = venv / "bin" / "python"
    if py.exists() and (venv / "bin" / "recalld").exists():
        return venv, None
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    t = time.perf_counter()
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", str(root)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"pip install failed: {p.stderr.strip()[-400:]}")
    return venv, time.perf_counter() - t


def _installed_commands(venv: Path, tmp: Path) -> dict:
    """{event: command line} as `recalld install claude-code` writes them into settings."""
    home = tmp / "agent-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), RECALLD_HOME=str(tmp / "install-home"))
    subprocess.run([str(venv / "bin" / "recalld"), "install", "claude-code", "--no-mcp", "--no-daemon"],
                   env=env, check=True, capture_output=True, cwd=str(tmp))
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    return {ev: hooks[NATIVE[ev]][0]["hooks"][0]["command"] for ev in EVENTS}


def _py(venv: Path, code: str, env: dict) -> str:
    # cwd "/": the venv's installed recalld, never a checkout in the current directory
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True, cwd="/")
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-600:])
    return p.stdout


def _store(venv: Path, base: Path, n: int, project: Path) -> tuple:
    """RECALLD_HOME with n memories (reused when one was built before), seconds to build."""
    home = base / f"home-{n}"
    done = home / "built"
    if done.exists():
        return home, None
    shutil.rmtree(home, ignore_errors=True)
    env = dict(os.environ, RECALLD_HOME=str(home))
    code = ("import sys; from pathlib import Path; from recalld.bench.scale import build_store; "
            f"print(build_store(Path({str(home)!r}), {n}, {str(project)!r}))")
    secs = float(_py(venv, code, env).strip().splitlines()[-1])
    _py(venv, f"from recalld.crystals import admin; from recalld.core import scope; admin.trust_project(scope.resolve_project({str(project)!r}))", env)
    done.write_text(str(n))
    return home, secs


def _payloads(project: Path, rounds: int) -> dict:
    """{event: [stdin bytes per round]}: Claude Code's documented payloads; sessions rotate so
    a crystal or memory already served in one does not silence later rounds."""
    r = random.Random(3)
    prompts, acts = synth.prompts(rounds, seed=5), bench_crystals.acts(rounds, seed=9)
    out = {ev: [] for ev in EVENTS}
    for i in range(rounds):
        base = {"session_id": f"hookcost-{i}", "transcript_path": "/tmp/hookcost.jsonl", "cwd": str(project),
                "permission_mode": "default"}
        out["session-start"].append({**base, "hook_event_name": "SessionStart", "source": "startup"})
        out["prompt-submit"].append({**base, "hook_event_name": "UserPromptSubmit", "prompt": prompts[i]})
        out["pre-tool"].append({**base, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                                "tool_input": {"command": acts[i], "description": "bench"}, "tool_use_id": "t1"})
        out["post-tool"].append({**base, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                                 "tool_input": {"command": f"ls src/{r.choice(synth.COMPONENTS)}"},
                                 "tool_response": {"stdout": "models.py\napi.py\n", "stderr": "",
                                                   "interrupted": False}, "tool_use_id": "t2"})
        out["stop"].append({**base, "hook_event_name": "Stop", "stop_hook_active": False,
                            "last_assistant_message": "Done: the tests pass and the flag is documented."})
    return {ev: [json.dumps(p).encode() for p in ps] for ev, ps in out.items()}


def _with_flags(argv: list, venv: Path, flags: list) -> list:
    """The same command with interpreter flags added (a console script runs under its python)."""
    py = str(venv / "bin" / "python")
    if os.path.basename(argv[0]).startswith("python"):
        return [argv[0], *flags, *argv[1:]]
    return [py, *flags, *argv]


def importtime(text: str) -> dict:
    """The -X importtime tree of one run: total, heaviest by self time, WATCH by cumulative (ms)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line.split(":", 1)[1].split("|", 2)
        rows.append((name[1:].rstrip(), int(self_us), int(cum_us)))
    top = [r for r in rows if not r[0].startswith(" ")]  # imported directly, not by another module
    return {"total_ms": sum(r[2] for r in top) / 1000,
            "self": {r[0].strip(): r[1] / 1000 for r in rows},
            "cum": {r[0].strip(): r[2] / 1000 for r in rows}}


def _profile(argv: list, venv: Path, env: dict, stdin: list, runs: int) -> dict:
    """Mean over `runs`: import tree (-X importtime) and hooktrace's phases and SQL."""
    imp: list = []
    for i in range(runs):
        p = subprocess.run(_with_flags(argv, venv, ["-X", "importtime"]), input=stdin[i], env=env,
                           capture_output=True, cwd=str(env.get("HOME", "/")))
        imp.append(importtime(p.stderr.decode("utf-8", "replace")))
    trace = Path(env["RECALLD_HOME"]) / "hookcost-trace.jsonl"
    trace.unlink(missing_ok=True)
    tenv = dict(env, RECALLD_HOOK_TRACE=str(trace))
    hook_args = argv[argv.index("hook") + 1:] if "hook" in argv else argv[-1:]
    for i in range(runs):
        subprocess.run([str(venv / "bin" / "python"), "-m", "recalld.bench.hooktrace", *hook_args],
                       input=stdin[i], env=tenv, capture_output=True, cwd="/")
    lines = [json.loads(x) for x in trace.read_text().splitlines()] if trace.exists() else []

    def mean(dicts):
        keys = {k for d in dicts for k in d}
        return {k: round(sum(d.get(k, 0.0) for d in dicts) / len(dicts), 3) for k in sorted(keys)} if dicts else {}

    selfs = mean([d["self"] for d in imp])
    cums = mean([d["cum"] for d in imp])
    return {"import_total_ms": round(sum(d["total_ms"] for d in imp) / len(imp), 2),
            "import_top_self_ms": dict(sorted(selfs.items(), key=lambda kv: -kv[1])[:12]),
            "import_watch_cum_ms": {k: cums[k] for k in WATCH if k in cums},
            "modules": len(selfs),
            "phases_ms": mean([x["spans"] for x in lines]), "sql_ms": mean([x["sql"] for x in lines]),
            "lazy_imports_ms": mean([x["imports"] for x in lines]),
            "hooktrace_import_ms": round(sum(x["import_ms"] for x in lines) / len(lines), 2) if lines else None,
            "outcomes": sorted({x["outcome"] for x in lines})}


def _measure(cmds: dict, venv: Path, home: Path, project: Path, rounds: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RECALLD_"))}
    env.update(RECALLD_HOME=str(home), HOME=str(home))
    stdin = _payloads(project, rounds + 3)
    # the launcher runs under `python -I -S` (recalld/install/entries.py): the bare start is the same
    bare = [str(venv / "bin" / "python"), "-I", "-S", "-c", "pass"]
    argvs = {ev: shlex.split(cmds[ev]) for ev in EVENTS}
    failed: list = []
    cpu: dict = {}  # name -> [user + system ms of each process]: the machine's load moves it far less

    def caller(argv, data, name=None):
        def call(i):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.run(argv, input=data[i], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env, cwd=str(project))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if name is not None:
                cpu.setdefault(name, []).append((after.ru_utime - before.ru_utime + after.ru_stime
                                                 - before.ru_stime) * 1000)
            if p.returncode != 0:
                failed.append(p.returncode)
        return call

    for ev in EVENTS:  # warm-up: page cache, crystal cache, schema
        for i in range(2):
            caller(argvs[ev], stdin[ev][rounds:])(i)
    calls = {"bare": caller(bare, [b""] * rounds, "bare")}
    calls.update({ev: caller(argvs[ev], stdin[ev], ev) for ev in EVENTS})
    load_before = load_average()
    t = interleaved(calls, rounds)
    if failed:
        raise RuntimeError(f"a hook exited with {sorted(set(failed))}")
    b50, b99 = pct(t["bare"], 0.5), pct(t["bare"], 0.99)
    c50 = pct(cpu["bare"], 0.5)
    out = {"rounds": rounds, "load_average": [load_before, load_average()],
           "bare": {"p50_ms": round(b50, 2), "p99_ms": round(b99, 2), "cpu_p50_ms": round(c50, 2)}, "events": {}}
    for ev in EVENTS:
        h50, h99 = pct(t[ev], 0.5), pct(t[ev], 0.99)
        diffs = [h - b for h, b in zip(t[ev], t["bare"])]
        out["events"][ev] = {"p50_ms": round(h50, 2), "p99_ms": round(h99, 2), "ratio_p50": round(h50 / b50, 2),
                             "own_p50_ms": round(h50 - b50, 2), "own_p99_ms": round(h99 - b99, 2),
                             "paired_own_p50_ms": round(pct(diffs, 0.5), 2),
                             "paired_own_p99_ms": round(pct(diffs, 0.99), 2),
                             "cpu_p50_ms": round(pct(cpu[ev], 0.5), 2),
                             "own_cpu_p50_ms": round(pct(cpu[ev], 0.5) - c50, 2)}
    out["outcomes"] = _outcomes(venv, home)
    return out


def _served_durations(venv: Path, home: Path, since: int) -> dict:
    """p50 / p99 of the receipts' duration_ms (the run's time inside the daemon, or inside the
    hook process when it ran itself) per hook and per how it ran, for receipts after `since`;
    for prompt-submit also per semantic path (`detail.recall`: semantic, or why lexical)."""
    code = ("import json, sys; from recalld.core import db; c = db.connect(readonly=True); o = {}\n"
            "q = 'SELECT hook, duration_ms, json_extract(detail, ?), json_extract(detail, ?) FROM receipts "
            "WHERE id > ? AND source = ?'\n"
            "for h, d, s, r in c.execute(q, ('$.served', '$.recall', int(sys.argv[1]), 'hook')):\n"
            " o.setdefault(h, {}).setdefault(s or 'in-process', []).append(d)\n"
            " r and o.setdefault(h + ' recall', {}).setdefault(r, []).append(d)\nprint(json.dumps(o))")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(since)], capture_output=True, text=True,
                       cwd="/", env=dict(os.environ, RECALLD_HOME=str(home)))
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-600:])
    got = json.loads(p.stdout)
    return {h: {how: {"runs": len(ds), "p50_ms": round(pct(ds, 0.5), 2), "p99_ms": round(pct(ds, 0.99), 2)}
                for how, ds in by.items()} for h, by in got.items()}


def _semantic_parts(venv: Path, home: Path, since: int) -> dict:
    """p50 / p99 of a served prompt's semantic step from its receipts (`detail.semantic_ms`):
    the query's embedding (`embed`, on the query server's thread from the run's arrival; 0 when
    cached), the dense search after it on the same thread (`dense`), the hook thread's wait for
    both after its own search (`waited`) and the fusion (`fuse`: the lexical candidates'
    cosines, the fused order), and how many came from the cache."""
    code = ("import json, sys; from recalld.core import db; c = db.connect(readonly=True)\n"
            "q = 'SELECT json_extract(detail, ?) FROM receipts WHERE id > ? AND source = ? AND hook = ?'\n"
            "rows = [json.loads(r[0]) for r in c.execute(q, ('$.semantic_ms', int(sys.argv[1]), 'hook', "
            "'prompt-submit')) if r[0]]\nprint(json.dumps(rows))")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(since)], capture_output=True, text=True,
                       cwd="/", env=dict(os.environ, RECALLD_HOME=str(home)))
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-600:])
    rows = [r for r in json.loads(p.stdout) if isinstance(r, dict)]
    out = {"runs": len(rows), "cached": sum(1 for r in rows if r.get("cached"))}
    for part in ("embed", "dense", "waited", "fuse"):
        v = [r[part] for r in rows if isinstance(r.get(part), (int, float)) and not (part == "embed" and r.get("cached"))]
        if v:
            out[part] = {"p50_ms": round(pct(v, 0.5), 2), "p99_ms": round(pct(v, 0.99), 2)}
    return out


def _last_receipt(venv: Path, home: Path) -> int:
    code = "from recalld.core import db; print(db.connect(readonly=True).execute('SELECT coalesce(max(id), 0) FROM receipts').fetchone()[0])"
    return int(_py(venv, code, dict(os.environ, RECALLD_HOME=str(home))).strip())


def _outcomes(venv: Path, home: Path) -> dict:
    code = ("import json; from recalld.core import db, receipts; c = db.connect(readonly=True); "
            "o = {}\nfor r in receipts.read(c, source='hook'):\n o.setdefault(r['hook'], {}).setdefault(r['outcome'], 0)\n"
            " o[r['hook']][r['outcome']] += 1\nprint(json.dumps(o))")
    return json.loads(_py(venv, code, dict(os.environ, RECALLD_HOME=str(home))))


def _semantic_store(home: Path) -> dict:
    """The semantic channel as a user's daemon has it: a unit vector of this machine's embedder
    for every memory that lacks one (random: the search's cost does not depend on what they
    say, and embedding 100k memories takes an hour here) and that embedder named in the
    store's settings, so the venv's daemon loads the same weights (the fresh venv has no
    weights package). Settings otherwise as shipped (`semantic_wait_ms` at its default)."""
    import numpy as np

    from recalld.core import db, settings
    from recalld.model import embed, resolve, vectors

    choice = resolve.resolve_embedder({"models": {}})
    if not choice.available:
        raise Unavailable(f"no embedder for the semantic channel: {choice.reason}")
    enc = embed.load(choice)
    conn = db.connect(home / "recalld.db")
    rng = np.random.default_rng(3)
    ids = [i for i, _ in vectors.pending(conn, enc.model, 0, 10 ** 9)]
    for s in range(0, len(ids), 5000):
        m = rng.standard_normal((len(ids[s:s + 5000]), enc.dim)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        vectors.write(conn, enc.model, zip(ids[s:s + 5000], m))
    conn.close()
    cfg = _store_settings(home, semantic=True)
    cfg.setdefault("models", {})["embedder"] = choice.path
    (home / "settings.json").write_text(json.dumps(cfg))
    return {"model": enc.model, "vectors_written": len(ids),
            "semantic_wait_ms": cfg.get("semantic_wait_ms", settings.DEFAULTS["semantic_wait_ms"])}


def _store_settings(home: Path, semantic: bool) -> dict:
    """The store's settings with the semantic channel at its default or off (`semantic_wait_ms`
    0, the user's switch: a store kept from a semantic run keeps its vectors and embedder, so
    off has to be said, not left out)."""
    path = home / "settings.json"
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg.pop("semantic_wait_ms", None)
    if not semantic:
        cfg["semantic_wait_ms"] = 0
    path.write_text(json.dumps(cfg))
    return cfg


def _store_settings_names_embedder(home: Path) -> bool:
    path = home / "settings.json"
    return path.exists() and bool((json.loads(path.read_text()).get("models") or {}).get("embedder"))


def _query_ready(home: Path, pid: int, limit_s: float = 300) -> dict:
    """Wait until the daemon's query server listens and has built the graphs its index wants
    (a minute at 100k under load; searches scan until then), so the measurement is of the
    steady state. Read from the daemon's log (its lines from `pid`): its status file is
    rewritten only when the daemon's main work changes."""
    from recalld.model import vectors

    log = home / "logs" / "daemon.log"
    t0 = time.monotonic()
    seen: dict = {}
    while time.monotonic() - t0 < limit_s:
        try:
            lines = log.read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("pid") == pid and ev.get("event") in ("query_listening", "query_graph_built",
                                                            "query_socket_failed"):
                seen[ev["event"]] = ev
        rows = (seen.get("query_listening") or {}).get("rows")
        if "query_socket_failed" in seen or ("query_listening" in seen and (
                "query_graph_built" in seen or (rows is not None and rows < vectors.ANN_MIN_ROWS))):
            break
        time.sleep(1)
    built = seen.get("query_graph_built") or {}
    return {"waited_s": round(time.monotonic() - t0, 1), "listening": "query_listening" in seen,
            "index_rows": (seen.get("query_listening") or {}).get("rows"),
            "graph_build_s": built.get("seconds"), "graph_partitions": built.get("partitions")}


def run(quick: bool = False, venv: "str | None" = None, keep: "str | None" = None,
        sizes: "str | None" = None, rounds: "int | None" = None, profile_runs: int = 5,
        serve: bool = True, semantic: bool = True) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-hookcost-"))
    base = Path(keep) if keep else tmp
    base.mkdir(parents=True, exist_ok=True)
    try:
        vdir, install_s = _venv(Path(venv) if venv else None, tmp)
        project = base / "project"
        if not (project / ".git").exists():
            project.mkdir(exist_ok=True)
            subprocess.run(["git", "init", "-q", str(project)], check=True)
            bench_crystals.generate(project / ".recalld" / "crystals")
        cmds = _installed_commands(vdir, tmp)
        ns = [int(s) for s in sizes.split(",")] if sizes else ([1, 2000] if quick else list(SIZES))
        n_rounds = rounds or (12 if quick else 60)
        result = {"pip_install_s": round(install_s, 1) if install_s is not None else "reused",
                  "commands": cmds, "sizes": {}}
        for n in ns:
            home, build_s = _store(vdir, base, n, project)
            _store_settings(home, semantic)
            m = _measure(cmds, vdir, home, project, n_rounds)  # no daemon: each hook runs itself
            m["store_build_s"] = round(build_s, 1) if build_s is not None else "reused"
            if serve:  # the daemon running, as `recalld install` sets it up: it serves the hooks
                env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RECALLD_"))}
                env.update(RECALLD_HOME=str(home), HOME=str(home))
                m["semantic"] = _semantic_store(home) if semantic else "off (semantic_wait_ms 0)"
                since = _last_receipt(vdir, home)
                with ServingDaemon([str(vdir / "bin" / "recalld"), "daemon", "run"], env, home) as daemon:
                    # off too, when the store names an embedder: the daemon still loads it and
                    # builds its graph, and a run during that build is not the steady state
                    if semantic or _store_settings_names_embedder(home):
                        m["query_server"] = _query_ready(home, daemon.proc.pid)
                    m["served"] = _measure(cmds, vdir, home, project, n_rounds)
                m["served"]["in_daemon"] = _served_durations(vdir, home, since)
                if semantic:
                    m["served"]["semantic_ms"] = _semantic_parts(vdir, home, since)
            result["sizes"][str(n)] = m
        # Profiles at the largest store: where the time of each event goes.
        home = base / f"home-{ns[-1]}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RECALLD_"))}
        env.update(RECALLD_HOME=str(home), HOME=str(home))
        stdin = _payloads(project, profile_runs)
        result["profile"] = {"memories": ns[-1], "runs": profile_runs,
                             **{ev: _profile(shlex.split(cmds[ev]), vdir, env, stdin[ev], profile_runs)
                                for ev in EVENTS}}
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("hookcost", options=(
        ("--venv", {"dest": "venv", "help": "reuse (or create) the venv here"}),
        ("--keep", {"dest": "keep", "help": "keep the stores here and reuse them"}),
        ("--sizes", {"dest": "sizes", "help": "memories per store, comma-separated (default 1,10000,100000)"}),
        ("--rounds", {"dest": "rounds", "type": int, "help": "interleaved rounds per store"}),
        ("--no-serve", {"dest": "serve", "action": "store_false",
                        "help": "only the hook processes on their own (no daemon serving them)"}),
        ("--no-semantic", {"dest": "semantic", "action": "store_false",
                           "help": "the served runs with the semantic channel off (semantic_wait_ms 0)"}),
    )))
