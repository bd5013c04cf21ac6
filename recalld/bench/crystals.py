"""Crystals at a large corpus's size: 300 generated crystals, acts that match about five.

Measures, in one run:
- the `pre-tool` hook's whole-process wall time (p50, p99) next to a bare `python -c pass`,
  both with sys.executable, interleaved so drift hits both alike (target: p50 within 1.5x);
- the packer's own time and the whole crystal source's time (index from cache, match, order,
  read the matched essences), in process;
- the figures from the receipts the hook runs wrote: matches per act, wanted chars vs
  budget, share of acts over budget, chars withheld and cut, marked claims cut.

    recalld bench crystals [--quick] [--json]
"""

import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recalld.bench.common import child_env, interleaved, pct, process, restore_home

TOOLS = ["git", "npm", "docker", "kubectl", "terraform", "psql", "make", "pytest", "cargo", "helm", "aws",
         "gcloud", "ansible", "redis-cli", "alembic", "rsync", "ssh", "curl", "pip", "yarn", "go", "mvn",
         "gradle", "bazel", "poetry", "uv", "rm", "mv", "sed", "find"]
VERBS = ["apply", "drain", "rebase", "restore", "migrate", "publish", "destroy", "upgrade", "rollback",
         "flush", "prune", "deploy"]
PHRASES = [f"{t} {v}" for t in TOOLS for v in VERBS]  # 360 distinct act phrases
CORPUS = 300
PHRASES_PER_ACT = 4
WORDS = ("the a schema migration replica primary cache budget release tag branch worktree index staging "
         "production tenant invoice price customer token secret rollback backup restore lock queue").split()


def _essence(rng: random.Random, n_chars: int, claims: int) -> str:
    lines = [f"⛔ {' '.join(rng.choice(WORDS) for _ in range(12)).upper()}."]
    while sum(len(x) + 1 for x in lines) < n_chars:
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))) + ".")
    for _ in range(claims - 1):
        at = rng.randint(1, len(lines))
        lines.insert(at, f"⛔ {' '.join(rng.choice(WORDS) for _ in range(10))}.")
    return "\n".join(lines)


def generate(directory: Path, seed: int = 7) -> list:
    """300 crystals: one or two act phrases as keys (an act of four phrases matches ~5), essences
    log-normal around 1,500 chars (about a third over the 2,000 cap), 40% with a second
    marked claim somewhere below the first, 85% with a tell."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    specs = []
    for i in range(CORPUS):
        keys = rng.sample(PHRASES, rng.choice([1, 1, 2, 2]))
        n = int(min(8000, max(200, rng.lognormvariate(math.log(1500), 0.6))))
        claims = 2 if rng.random() < 0.4 else 1
        tell = (f"tell {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14)))) if rng.random() < 0.85 else None
        on = "bash, write" if rng.random() < 0.8 else "bash"
        text = (f"crystal:\non: {on}\nmatch: {', '.join(keys)}\n" + (f"tell: {tell}\n" if tell else "") +
                f"\n# crystal {i}\n\nHistory and rationale, never delivered.\n" + "Lorem ipsum. " * 80 +
                f"\n\n<!-- crystal:essence -->\n{_essence(rng, n, claims)}\n<!-- /crystal:essence -->\n")
        (directory / f"c{i:03d}.md").write_text(text, encoding="utf-8")
        specs.append(keys)
    return specs


def acts(n: int, seed: int = 11) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        phrases = rng.sample(PHRASES, PHRASES_PER_ACT)
        out.append(" && ".join(f"{p} --env={rng.choice(WORDS)}" for p in phrases))
    return out


def _payload(project: Path, command: str, session: str) -> bytes:
    return json.dumps({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                       "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command, "description": "bench"},
                       "tool_use_id": "toolu_bench"}).encode()


def run(quick: bool = False) -> dict:
    from recalld.install.plan import ensure_bytecode

    ensure_bytecode()  # as installed (see bench_core): the hook loads .pyc, not source
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-crystals-"))
    saved = os.environ.get("RECALLD_HOME")
    try:
        return _run(quick, tmp)
    finally:
        restore_home(saved)
        shutil.rmtree(tmp, ignore_errors=True)


def _run(quick: bool, tmp: Path) -> dict:
    n_runs = 20 if quick else 80
    home, project = tmp / "home", tmp / "proj"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    generate(project / ".recalld" / "crystals")
    env = child_env(RECALLD_HOME=str(home), HOME=str(tmp))
    env.pop("RECALLD_AGENT", None)
    os.environ["RECALLD_HOME"] = str(home)  # for the in-process part below
    from recalld.crystals import admin as _admin
    from recalld.core import scope as _scope

    _admin.trust_project(_scope.resolve_project(str(project)))  # delivered once trusted
    texts = acts(n_runs + 5)
    hook_cmd = [sys.executable, "-m", "recalld", "hook", "pre-tool"]
    bare_cmd = [sys.executable, "-c", "pass"]
    # Warm-up: creates the store, applies migrations, builds the crystal cache.
    for t in texts[:3]:
        subprocess.run(hook_cmd, input=_payload(project, t, "warm"), capture_output=True, env=env, check=True)
        subprocess.run(bare_cmd, capture_output=True, env=env, check=True)
    stdin = [_payload(project, t, f"bench-{i % 4}") for i, t in enumerate(texts[5:5 + n_runs])]
    failed = []

    def hook_run(i):
        p = subprocess.run(hook_cmd, input=stdin[i], capture_output=True, env=env)
        if p.returncode != 0:
            failed.append(p.returncode)

    t = interleaved({"hook": hook_run, "bare": process(bare_cmd, env=env)}, n_runs)
    assert not failed, f"the hook exited with {failed}"
    hook_ms, bare_ms = t["hook"], t["bare"]

    from recalld.crystals import admin
    from recalld import crystals
    from recalld.core import db, packer, receipts
    from recalld.hook import crystal_source, payloads

    conn = db.connect()
    recs = [r for r in receipts.read(conn, source="hook") if r.get("session", "").startswith("bench-")]
    internal = [r["duration_ms"] for r in recs if r.get("duration_ms") is not None]
    outcomes = {}
    for r in recs:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    index = crystals.load_for(str(project))
    s = admin.stats(index, recs)

    # In process: the crystal source and the packer alone, on the same acts.
    source_ms, pack_ms = [], []
    for t in texts[5:5 + n_runs]:
        hi = payloads.HookInput(event="pre-tool", agent_kind="claude", native_event="PreToolUse",
                                session="bench-0", cwd=str(project), act="bash", text=t)
        t0 = time.perf_counter()
        idx = crystals.load_for(str(project))
        items, _ = crystal_source.candidates(idx, hi, conn, str(project))
        t1 = time.perf_counter()
        packer.pack(items, 4000, 2000)
        t2 = time.perf_counter()
        source_ms.append((t1 - t0) * 1000)
        pack_ms.append((t2 - t1) * 1000)
    conn.close()

    over_cap = [c for c in index.crystals if c.essence_chars + len(f"[crystal {c.id}] ") > 2000]
    tail_claims = 0
    for c in over_cap:
        full = f"[crystal {c.id}] {crystals.essence(c)}"
        tail_claims += packer.cut(full, 2000)[2] > 0
    m = statistics.median
    figures = {
        "crystals": len(index.crystals), "runs": n_runs,
        "hook_p50_ms": round(m(hook_ms), 2), "hook_p99_ms": round(pct(hook_ms, 0.99), 2),
        "bare_python_p50_ms": round(m(bare_ms), 2), "bare_python_p99_ms": round(pct(bare_ms, 0.99), 2),
        "hook_vs_bare_p50": round(m(hook_ms) / m(bare_ms), 3),
        "hook_internal_p50_ms": round(m(internal), 2) if internal else None,
        "hook_internal_p99_ms": round(pct(internal, 0.99), 2) if internal else None,
        "crystal_source_p50_ms": round(m(source_ms), 3), "crystal_source_p99_ms": round(pct(source_ms, 0.99), 3),
        "pack_p50_ms": round(m(pack_ms), 4), "pack_p99_ms": round(pct(pack_ms, 0.99), 4),
        "outcomes": outcomes,
        "matches_per_act_median": s["matches_per_act"]["median"],
        "wanted_chars_median": s["wanted_chars"]["median"], "budget": s["budget"],
        "share_acts_over_budget": s["share_over_budget"],
        "chars_withheld": s["chars_withheld"], "chars_cut": s["chars_cut"], "claims_cut": s["claims_cut"],
        "delivered": s["outcomes"],
        "crystals_over_cap": len(over_cap), "over_cap_with_marked_claim_in_tail": tail_claims,
        "never_delivered": len(s["never_delivered"]),
    }
    return figures


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("crystals"))
