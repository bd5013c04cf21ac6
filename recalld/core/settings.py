"""Settings: defaults overlaid by RECALLD_HOME/settings.json (standard library only)."""

import copy
import json
import os

from recalld.core import paths

# The agent's hard cap on one hook output string (Claude Code truncates at 10,000).
AGENT_OUTPUT_CAP = 10_000

DEFAULTS: dict = {
    # pre-step (prompt-submit) recall
    "budget_chars": 4000,
    "item_cap_chars": 2000,
    "max_results": 5,
    # IDF-weighted share of the query's informative terms a memory must cover to be injected
    "floor": 0.3,
    # boot (session-start): the always-loaded set
    "boot_budget_chars": 2000,
    # tool acts (pre-tool/post-tool): crystals and the judge's queue share this
    "tool_budget_chars": 4000,
    "deadline_ms": 300,
    # add a sha256 of the prompt to receipts (off: receipts stay payload-free)
    "receipt_hash": False,
    # the background pass
    # judge.threshold: query-likelihood gain per need token (recalld.judge), calibrated for the
    # embedded SmolLM2-135M on the LoCoMo dev split by benchmarks/bench_judge.py (docs/judge.md);
    # max_pass: at most this many candidates pass per need (in recalld.rerank's order: the judge
    # gates, the re-ranked order chooses)
    "judge": {"threshold": 1.3, "max_candidates": 5, "max_pass": 1, "timeout_s": 20},
    "queue": {"expire_steps": 6, "expire_minutes": 30},
    "models": {"judge": None, "proposer": None},
    # capture: the proposer drafts, policies screen, the agent decides (docs/capture.md)
    "proposals": {"enabled": True, "max_drafts": 3, "min_chars": 40, "min_words": 6, "max_chars": 600,
                  "min_confidence": 0.5, "duplicate_ratio": 88, "min_grounding": 0.6, "window_chars": 2000,
                  "max_tokens": 256,
                  "timeout_s": 60, "show_times": 2, "show_max": 5, "review_gate": False},
    # the daemon (docs/daemon.md): extra transcript roots, first-start window, need timing.
    # debounce_s 0.5: in the shared transcripts 41% of records follow the previous one within
    # 0.5 s (one message's blocks) and only 8% more within 1 s, while the agent's next tool
    # call comes a median 3.8 s after a tool result; a shorter wait lands more passes in time.
    "daemon": {"roots": [], "recent_days": 2, "autostart": False, "rescan_s": 30, "poll_s": 2,
               "live_s": 300, "debounce_s": 0.5, "max_wait_s": 6.0, "min_pass_interval_s": 15,
               "max_passes_per_minute": 6, "need_window": 12, "need_max_chars": 600,
               "preload_model": True, "load_allowance_s": 60},
}


def load() -> dict:
    merged = copy.deepcopy(DEFAULTS)
    try:
        with open(paths.settings_path(), encoding="utf-8") as f:
            user = json.load(f)
    except (OSError, ValueError):
        user = {}
    if isinstance(user, dict):
        _merge(merged, user)
    env_deadline = os.environ.get("RECALLD_DEADLINE_MS")
    if env_deadline:
        try:
            merged["deadline_ms"] = int(env_deadline)
        except ValueError:
            pass
    merged["budget_chars"] = min(int(merged["budget_chars"]), AGENT_OUTPUT_CAP)
    return merged


def _merge(base: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def save(values: dict) -> None:
    """Write the user's overrides (not the defaults) atomically."""
    path = paths.settings_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_overrides() -> dict:
    try:
        with open(paths.settings_path(), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
