"""The proposer on the shared transcripts, with the real embedded model.

    python3 benchmarks/bench_proposer.py [--quick] [--json]

Passes are run the way the daemon runs them: one per finished turn (the events since the
previous turn end), in a fresh RECALLD_HOME. `--quick` runs one pass per file instead.
Figures: proposals per 100 turns, drafts and rejections by reason, duplicate rate (drafts
rejected as duplicates of a memory or a pending proposal, over all drafts), model seconds per
pass, and secrets leaked: every transcript is copied with secrets of each kind planted in its
prompts, agent text and tool results, passed again, and every table of the database and every
file under RECALLD_HOME is searched for the planted values (must be 0).
"""

import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts" / "claude-code"

SECRETS = {
    "openai": "sk-proj-BenchOpenAIKey0123456789abcdefXYZ",
    "anthropic": "sk-ant-api03-BenchAnthropicKey0123456789-abc",
    "github": "ghp_BenchGitHubT0kenValue0123456789abcd",
    "aws": "AKIABENCH00EXAMPLE77",
    "slack": "xoxb-1111-2222-BenchSlackT0ken",
    "google": "AIzaSyBench-GoogleKey0123456789abcdefghij",
    "stripe": "sk_live_BenchStripeKey0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJiZW5jaCI6InllcyJ9.BenchJwtSignature0123456789",
    "private_key": "MIIEpBenchPrivateKeyBody0123456789",
    "url_password": "BenchUrlPassw0rd",
    "assignment": "BenchAssignedPassw0rd",
    "bearer": "BenchBearerT0ken0123456789",
    "env": "BenchEnvSecretValue",
}


def secret_block() -> str:
    s = SECRETS
    return (f"keys {s['openai']} {s['anthropic']} {s['github']} {s['aws']} {s['slack']} {s['google']} "
            f"{s['stripe']} {s['jwt']}; db postgres://app:{s['url_password']}@db:5432/x; "
            f"password = \"{s['assignment']}\"; Authorization: Bearer {s['bearer']}\n"
            f"-----BEGIN RSA PRIVATE KEY-----\n{s['private_key']}\n-----END RSA PRIVATE KEY-----\n"
            f"STRIPE_SECRET_KEY={s['env']}\n")


def plant(src: Path, dst: Path) -> None:
    out = []
    for line in src.read_text(encoding="utf-8").splitlines():
        o = json.loads(line)
        m = o.get("message") if isinstance(o.get("message"), dict) else None
        if m is not None:
            c = m.get("content")
            if isinstance(c, str) and not c.startswith("<"):
                m["content"] = c + "\n" + secret_block()
            elif isinstance(c, list):
                for b in c:
                    if b.get("type") == "text":
                        b["text"] += "\n" + secret_block()
                    elif b.get("type") == "tool_result":
                        b["content"] = secret_block() + (b["content"] if isinstance(b["content"], str)
                                                         else json.dumps(b["content"]))
                        b["is_error"] = True
        out.append(json.dumps(o))
    dst.write_text("\n".join(out) + "\n", encoding="utf-8")


def turns_of(path: Path) -> list:
    from recalld.daemon import transcripts

    turns, cur = [], []
    for ev in transcripts.parse_file(str(path)):
        if ev.kind == "turn_end":
            turns.append(cur)
            cur = []
        else:
            cur.append(ev)
    return turns  # an unfinished last turn is not passed (the daemon waits for its end)


def leaks(home: Path) -> dict:
    found: Counter = Counter()
    conn = sqlite3.connect(str(home / "recalld.db"))
    try:
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            try:
                rows = conn.execute(f'SELECT * FROM "{t}"').fetchall()
            except sqlite3.Error:
                continue
            for row in rows:
                blob = " ".join(str(v) for v in row)
                found.update(f"{t}:{k}" for k, v in SECRETS.items() if v in blob)
    finally:
        conn.close()
    for f in home.rglob("*"):
        if f.is_file() and not f.name.startswith("recalld.db"):
            text = f.read_bytes().decode("utf-8", "replace")
            found.update(f"{f.name}:{k}" for k, v in SECRETS.items() if v in text)
    return dict(found)


def _passes(files, per_turn: bool, runtime, examples: list) -> list:
    from recalld.capture import proposer

    results = []
    for f in files:
        if per_turn:
            for turn in turns_of(f):
                if turn:
                    results.append(proposer.run_pass(str(f), session=turn[0].session, events=turn,
                                                     origin="bench", runtime=runtime))
        else:
            results.append(proposer.run_pass(str(f), origin="bench", runtime=runtime))
        for res in results:
            for d, reason in res.rejected:
                if len(examples) < 12 and d.text and all(e["text"] != d.text for e in examples):
                    examples.append({"file": f.name, "kind": d.kind, "text": d.text[:200], "rejected": reason})
        kept = [d for r in results for d in r.drafts if all(d is not x for x, _ in r.rejected)]
        for d in kept:
            if all(e["text"] != d.text for e in examples):
                examples.append({"file": f.name, "kind": d.kind, "text": d.text[:200], "rejected": None})
    return results


def run(quick: bool = False) -> dict:
    files = sorted(TRANSCRIPTS.glob("*.jsonl"))
    old_home = os.environ.get("RECALLD_HOME")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["RECALLD_HOME"] = str(tmp / "home")
        try:
            out = _measure(files, tmp, quick)
        finally:
            if old_home is None:
                os.environ.pop("RECALLD_HOME", None)
            else:
                os.environ["RECALLD_HOME"] = old_home
    return out


def _measure(files, tmp: Path, quick: bool) -> dict:
    from recalld.model import runtime as llm

    t0 = time.perf_counter()
    runtime = llm.require_runtime("proposer", {"models": {}})
    load_s = time.perf_counter() - t0
    examples: list = []
    results = _passes(files, not quick, runtime, examples)
    turns = sum(1 for f in files for _ in turns_of(f))
    planted = []
    for f in files:
        dst = tmp / f"planted-{f.name}"
        plant(f, dst)
        planted.append(dst)
    secret_results = _passes(planted[:2] if quick else planted, False, runtime, [])
    leaked = leaks(tmp / "home")
    model_passes = [r for r in results if r.model_ms > 0]
    drafts = sum(len(r.drafts) for r in results)
    rejections: Counter = Counter()
    for r in results:
        rejections.update(r.rejections)
    stored = sum(len(r.stored_ids) for r in results)
    dups = rejections.get("duplicate_memory", 0) + rejections.get("duplicate_proposal", 0)
    secs = [r.model_ms / 1000 for r in model_passes]
    return {
        "mode": "one pass per file" if quick else "one pass per finished turn (as the daemon)",
        "model": runtime.name, "model_load_s": round(load_s, 2),
        "files": len(files), "turns": turns, "passes": len(results), "model_passes": len(model_passes),
        "outcomes": dict(Counter(r.outcome for r in results)),
        "errors": [r.error for r in results if r.outcome in ("error", "timeout")][:5],
        "drafts": drafts, "stored_proposals": stored,
        "proposals_per_100_turns": round(100 * stored / turns, 1) if turns else None,
        "drafts_per_100_turns": round(100 * drafts / turns, 1) if turns else None,
        "rejections_by_reason": dict(rejections.most_common()),
        "duplicate_rate": round(dups / drafts, 3) if drafts else 0.0,
        "model_s_per_pass": {"mean": round(statistics.mean(secs), 2) if secs else None,
                             "p50": round(statistics.median(secs), 2) if secs else None,
                             "max": round(max(secs), 2) if secs else None},
        "secret_passes": len(secret_results),
        "secrets_planted_kinds": len(SECRETS),
        "redactions_in_secret_passes": sum(sum(r.redactions.values()) for r in secret_results),
        "secrets_leaked": sum(leaked.values()), "leaks": leaked,
        "examples": examples,
        "machine": f"{os.cpu_count()} CPUs, llama.cpp threads={runtime.n_threads}",
        "notes": ["Drafts come from the 135M embedded model; the policies, not the model, keep junk "
                  "and secrets out of the store (docs/capture.md)."],
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = run(quick="--quick" in argv)
    if "--json" in argv:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    print(f"proposer bench ({out['mode']}), model {out['model']} (load {out['model_load_s']} s), {out['machine']}")
    print(f"  {out['files']} transcripts, {out['turns']} turns, {out['passes']} passes "
          f"({out['model_passes']} called the model): {out['outcomes']}")
    print(f"  drafts {out['drafts']} ({out['drafts_per_100_turns']} per 100 turns), stored proposals "
          f"{out['stored_proposals']} ({out['proposals_per_100_turns']} per 100 turns)")
    print(f"  rejections by reason: {out['rejections_by_reason']}")
    print(f"  duplicate rate: {out['duplicate_rate']}")
    m = out["model_s_per_pass"]
    print(f"  model seconds per pass: mean {m['mean']}, p50 {m['p50']}, max {m['max']}")
    print(f"  secrets: {out['secrets_planted_kinds']} kinds planted, {out['secret_passes']} passes, "
          f"{out['redactions_in_secret_passes']} redactions, leaked {out['secrets_leaked']} {out['leaks'] or ''}")
    if out["errors"]:
        print(f"  errors: {out['errors']}")
    print("  examples:")
    for e in out["examples"]:
        print(f"    [{e['kind']}] {'REJECTED ' + e['rejected'] if e['rejected'] else 'STORED'}: {e['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
