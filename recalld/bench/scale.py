"""Scale benchmark: the whole `prompt-submit` hook process vs a bare interpreter start, in-process
search latency, durable `remember` latency and database size, at 1k / 10k / 100k memories.

    recalld bench scale [--quick] [--json]

The package is byte-compiled first, as `pip install` and `recalld install` leave it; without
.pyc files (PYTHONDONTWRITEBYTECODE and an editable install) every hook run recompiles its
modules. Targets: hook p50 within 1.5x and p99 within 2x of `python -c pass` at 100k
memories; search p50 under 5 ms at 100k; remember p50 under 10 ms.
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from recalld.bench import synth
from recalld.bench.common import child_env, interleaved, pct, process, restore_home


def hook_command() -> list:
    """The console script an agent runs, when installed next to this interpreter."""
    script = Path(sys.executable).parent / "recalld"
    if script.exists():
        return [str(script), "hook", "prompt-submit"]
    found = shutil.which("recalld")
    if found:
        return [found, "hook", "prompt-submit"]
    return [sys.executable, "-m", "recalld", "hook", "prompt-submit"]


def build_store(home: Path, n: int, project: str) -> float:
    os.environ["RECALLD_HOME"] = str(home)
    from recalld import memories
    from recalld.core import db, scope

    conn = db.connect()
    sc = scope.Scope(project, "main")
    lines = [json.dumps(m) for m in synth.memories(n)]
    t = time.perf_counter()
    for i in range(0, len(lines), 5000):
        memories.import_jsonl(conn, lines[i:i + 5000], sc)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - t


def run(quick: bool = False) -> dict:
    saved = os.environ.get("RECALLD_HOME")
    try:
        return _run(quick)
    finally:
        restore_home(saved)


def _run(quick: bool) -> dict:
    from recalld import memories
    from recalld.core import db, scope, search
    from recalld.install.plan import ensure_bytecode

    sizes = [1000, 10_000] if quick else [1000, 10_000, 100_000]
    runs = 15 if quick else 40
    # As installed: `pip install` and `recalld install` leave .pyc files next to the modules.
    results = {"sizes": {}, "runs_per_size": runs, "hook_command": " ".join(hook_command()[:1]),
               "bytecode": ensure_bytecode()}
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-scale-"))
    project = str(tmp / "project")
    os.makedirs(project)
    prompts = synth.prompts(50)
    try:
        for n in sizes:
            home = tmp / f"home-{n}"
            build_s = build_store(home, n, project)
            env = child_env(RECALLD_HOME=str(home))
            payload = json.dumps({"session_id": "bench", "transcript_path": "/dev/null", "cwd": project,
                                  "hook_event_name": "UserPromptSubmit", "prompt": prompts[0]}).encode()
            t = interleaved({"bare": process([sys.executable, "-c", "pass"], env=env),
                             "hook": process(hook_command(), payload, env)}, runs)
            conn = db.connect()
            sc = scope.Scope(project, "main")
            stemmer = search.Stemmer(conn)
            rounds = (2 if quick else 3) * len(prompts)
            lat = interleaved({"search": lambda i: search.search(conn, prompts[i % len(prompts)], sc, limit=5,
                                                                 stemmer=stemmer)}, rounds)["search"]
            injected = sum(bool(search.search(conn, p, sc, limit=5, floor=0.3, stemmer=stemmer)) for p in prompts)
            wr = interleaved({"w": lambda i: memories.remember(
                conn, f"bench write {i}: the exporter keeps cents as integers", sc, check_similar=False)},
                10 if quick else 30)["w"]
            wr_sim = interleaved({"w": lambda i: memories.remember(
                conn, f"bench write with similarity check {i}: billing retries Stripe calls", sc)},
                5 if quick else 10)["w"]
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            size = (home / "recalld.db").stat().st_size
            bare50, hook50 = statistics.median(t["bare"]), statistics.median(t["hook"])
            bare99, hook99 = pct(t["bare"], 0.99), pct(t["hook"], 0.99)
            results["sizes"][n] = {
                "build_s": round(build_s, 2),
                "bare_p50_ms": round(bare50, 2), "bare_p99_ms": round(bare99, 2),
                "hook_p50_ms": round(hook50, 2), "hook_p99_ms": round(hook99, 2),
                "hook_p50_ratio": round(hook50 / bare50, 3), "hook_p99_ratio": round(hook99 / bare99, 3),
                "search_p50_ms": round(statistics.median(lat), 3), "search_p99_ms": round(pct(lat, 0.99), 3),
                "prompts_injecting_at_floor": f"{injected}/{len(prompts)}",
                "remember_p50_ms": round(statistics.median(wr), 2), "remember_p99_ms": round(pct(wr, 0.99), 2),
                "remember_with_similar_p50_ms": round(statistics.median(wr_sim), 2),
                "db_bytes": size, "bytes_per_memory": round(size / n),
            }
            print(f"{n:>7} memories: " + json.dumps(results["sizes"][n]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("scale"))
