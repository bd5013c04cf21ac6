"""The proposer on the shared transcripts, with the real embedded model ranking (what it costs when a user turns it on).

    recalld bench proposer [--quick] [--json]

Passes are run the way the daemon runs them: one per finished turn (the events since the
previous turn end), in a fresh RECALLD_HOME. `--quick` runs one pass per file instead.
Figures: proposals per 100 turns, drafts and rejections by reason, duplicate rate (drafts
rejected as duplicates of a memory or a pending proposal, over all drafts), model seconds per
pass, and secrets leaked: every transcript is copied with secrets of each kind planted in its
prompts, agent text, thinking and tool results (recalld.bench.planted, the same values
tests/test_proposer.py plants), passed again, and every table of the database and every file
under RECALLD_HOME is searched for the planted values (must be 0).
"""

import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from recalld.bench import planted
from recalld.bench.common import Unavailable, restore_home, transcripts_dir


def turns_of(path: Path) -> list:
    from recalld.daemon import transcripts

    return transcripts.file_turns(str(path))  # an unfinished last turn is not passed


# The model ranks only when asked (proposals.model_weight > 0): this benchmark measures that path.
WITH_MODEL = {"proposals": {"model_weight": 1.0}}


def _passes(files, per_turn: bool, runtime, examples: list) -> list:
    from recalld.capture import proposer

    results = []
    for f in files:
        if per_turn:
            for turn in turns_of(f):
                if turn:
                    results.append(proposer.run_pass(str(f), session=turn[0].session, events=turn,
                                                     origin="bench", runtime=runtime, cfg=WITH_MODEL))
        else:
            results.append(proposer.run_pass(str(f), origin="bench", runtime=runtime, cfg=WITH_MODEL))
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
    files = sorted(transcripts_dir().glob("*.jsonl"))
    old_home = os.environ.get("RECALLD_HOME")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["RECALLD_HOME"] = str(tmp / "home")
        try:
            out = _measure(files, tmp, quick)
        finally:
            restore_home(old_home)
    return out


def _measure(files, tmp: Path, quick: bool) -> dict:
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable as NoModel

    t0 = time.perf_counter()
    try:
        runtime = llm.require_runtime("proposer", {"models": {}})
    except NoModel as e:
        raise Unavailable(f"no proposer model: {e}") from None
    load_s = time.perf_counter() - t0
    examples: list = []
    results = _passes(files, not quick, runtime, examples)
    turns = sum(1 for f in files for _ in turns_of(f))
    copies = []
    for f in files:
        dst = tmp / f"planted-{f.name}"
        planted.plant(f, dst)
        copies.append(dst)
    secret_results = _passes(copies[:2] if quick else copies, False, runtime, [])
    leaked = dict(Counter(f"{where}:{kind}" for where, kind in planted.leaks(tmp / "home")))
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
        "secrets_planted_kinds": len(planted.PLANTED),
        "redactions_in_secret_passes": sum(sum(r.redactions.values()) for r in secret_results),
        "secrets_leaked": sum(leaked.values()), "leaks": leaked,
        "examples": examples,
        "machine": f"{os.cpu_count()} CPUs, llama.cpp threads={runtime.n_threads}",
        "notes": ["The passes rank with the embedded model (proposals.model_weight 1; the default ranks by "
                  "cues and loads no model): what the model costs when a user turns it on. The policies, "
                  "not the model, keep junk and secrets out of the store (docs/capture.md)."],
    }


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("proposer"))
