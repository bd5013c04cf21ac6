"""Settings: defaults overlaid by RECALLD_HOME/settings.json (standard library only).

Every value is checked against RULES, on write (`recalld config set` refuses a bad one) and on
read: the hook reads settings on every run, and one bad value (a string for a number, a null,
`deadline_ms: 0`, which would switch the deadline off) used to make every hook fail before it
could write a receipt. A bad value now falls back to its default, and load() names the keys
that fell back so the hook's receipt can say so (`detail.settings_fallback`).
"""

import os

from recalld.core import jsonio, paths

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
    # the semantic pre-step (recalld/hook/semantic.py): how long a prompt-submit hook waits for
    # the daemon's fused ranking before it answers lexically; 0 switches the channel off. The
    # wait is what a served run at 100k memories on the loaded 2-core machine stays inside
    # (docs/architecture.md, "The semantic pre-step"); without the daemon it costs one stat.
    "semantic_wait_ms": 25,
    # add a sha256 of the prompt to receipts (off: receipts stay payload-free)
    "receipt_hash": False,
    # the background pass
    # judge.threshold: the probability that a memory answers the need (recalld.judge.calibrated),
    # chosen leave-one-group-out by recalld/bench/fit_judge.py for the embedded SmolLM2-135M and
    # all-MiniLM-L6-v2 (docs/judge.md); max_pass: at most this many of the most probable pass
    "judge": {"threshold": 0.6, "max_candidates": 5, "max_pass": 1, "timeout_s": 20},
    "queue": {"expire_steps": 6, "expire_minutes": 30},
    # models.embedder: a bundle directory or .zip (recalld.model.resolve), "off", or None (auto)
    "models": {"judge": None, "proposer": None, "embedder": None},
    # capture: the proposer drafts, policies screen, the agent decides (docs/capture.md)
    "proposals": {"enabled": True, "max_drafts": 3, "min_chars": 40, "min_words": 6, "max_chars": 600,
                  "min_confidence": 0.5, "duplicate_ratio": 88, "min_grounding": 0.6,
                  "timeout_s": 60, "show_times": 2, "show_max": 5, "review_gate": False},
    # the daemon (docs/daemon.md): extra transcript roots, first-start window, need timing.
    # debounce_s 0.5: in the shared transcripts 41% of records follow the previous one within
    # 0.5 s (one message's blocks) and only 8% more within 1 s, while the agent's next tool
    # call comes a median 3.8 s after a tool result; a shorter wait lands more passes in time.
    "daemon": {"roots": [], "recent_days": 2, "autostart": False, "rescan_s": 30, "poll_s": 2,
               "live_s": 300, "debounce_s": 0.5, "max_wait_s": 6.0, "min_pass_interval_s": 15,
               "max_passes_per_minute": 6, "need_window": 12, "need_max_chars": 600,
               "preload_model": True, "load_allowance_s": 60, "serve_hooks": 8},
}


# What a setting may hold, by dotted key: (type, low, high), the range inclusive. Types: "int",
# "number" (int or float), "bool", "str", "str?" (a string or null), "str-list". A key of
# DEFAULTS not listed here takes its default's type, with no range.
RULES: dict = {
    "budget_chars": ("int", 0, AGENT_OUTPUT_CAP), "item_cap_chars": ("int", 1, AGENT_OUTPUT_CAP),
    "max_results": ("int", 1, 100), "floor": ("number", 0, 1),
    "boot_budget_chars": ("int", 0, AGENT_OUTPUT_CAP), "tool_budget_chars": ("int", 0, AGENT_OUTPUT_CAP),
    # at least 1: 0 would switch the hook's deadline off (setitimer(0) disarms the timer)
    "deadline_ms": ("int", 1, 60_000), "semantic_wait_ms": ("int", 0, 60_000),
    "judge.threshold": ("number", 0, 1), "judge.max_candidates": ("int", 1, 50),
    "judge.max_pass": ("int", 0, 10), "judge.timeout_s": ("number", 0.1, 600),
    "queue.expire_steps": ("int", 1, 1000), "queue.expire_minutes": ("number", 0, 10_080),
    "models.judge": ("str?", None, None), "models.proposer": ("str?", None, None),
    "models.embedder": ("str?", None, None),
    "proposals.max_drafts": ("int", 0, 20), "proposals.min_chars": ("int", 0, 10_000),
    "proposals.min_words": ("int", 0, 1000), "proposals.max_chars": ("int", 1, 10_000),
    "proposals.min_confidence": ("number", 0, 1), "proposals.duplicate_ratio": ("number", 0, 100),
    "proposals.min_grounding": ("number", 0, 1), "proposals.timeout_s": ("number", 0.1, 3600),
    "proposals.show_times": ("int", 0, 100), "proposals.show_max": ("int", 0, 100),
    "daemon.roots": ("str-list", None, None), "daemon.recent_days": ("number", 0, 3650),
    "daemon.rescan_s": ("number", 1, 86_400), "daemon.poll_s": ("number", 0.05, 3600),
    "daemon.live_s": ("number", 0, 86_400), "daemon.debounce_s": ("number", 0, 60),
    "daemon.max_wait_s": ("number", 0, 600), "daemon.min_pass_interval_s": ("number", 0, 3600),
    "daemon.max_passes_per_minute": ("int", 0, 600), "daemon.need_window": ("int", 1, 1000),
    "daemon.need_max_chars": ("int", 1, 100_000), "daemon.load_allowance_s": ("number", 0, 3600),
    "daemon.serve_hooks": ("int", 0, 16),
}
_TYPE_WORDS = {"int": "an integer", "number": "a number", "bool": "true or false", "str": "a string",
               "str?": "a string or null", "str-list": "a list of strings"}


def _rule(key: str, default) -> tuple:
    rule = RULES.get(key)
    if rule is not None:
        return rule
    if isinstance(default, bool):
        return ("bool", None, None)
    if isinstance(default, int):
        return ("int", None, None)
    if isinstance(default, float):
        return ("number", None, None)
    if isinstance(default, list):
        return ("str-list", None, None)
    return ("str?" if default is None else "str", None, None)


def expected(key: str, default) -> str:
    """'an integer 1..60000': what `key` may hold, for error messages."""
    kind, lo, hi = _rule(key, default)
    words = _TYPE_WORDS[kind]
    return f"{words} {lo}..{hi}" if lo is not None else words


def _checked(key: str, value, default) -> tuple:
    """(ok, value) for one leaf setting; an integral float for an int setting becomes an int."""
    kind, lo, hi = _rule(key, default)
    if kind == "bool":
        return isinstance(value, bool), value
    if kind in ("int", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return False, value  # bool is an int to Python; NaN is a number to json
        if kind == "int" and not isinstance(value, int):
            if not value.is_integer():
                return False, value
            value = int(value)
        if value in (float("inf"), float("-inf")):
            return False, value
        return (lo is None or lo <= value) and (hi is None or value <= hi), value
    if kind == "str-list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value), value
    return isinstance(value, str) or (kind == "str?" and value is None), value


def check(key: str, value) -> tuple:
    """(value, None) if `value` is valid for the dotted `key`, else (value, one line saying why).
    A dict for a group (`judge`) is checked leaf by leaf; unknown keys are refused."""
    default: object = DEFAULTS
    for part in key.split("."):
        if not isinstance(default, dict) or part not in default:
            return value, f"unknown setting {key!r}"
        default = default[part]
    if isinstance(default, dict):
        if not isinstance(value, dict):
            return value, f"{key}: expected an object of its settings ({', '.join(default)}), got {jsonio.dumps(value)}"
        out = {}
        for k, v in value.items():
            out[k], err = check(f"{key}.{k}", v)
            if err:
                return value, err
        return out, None
    ok, value = _checked(key, value, default)
    if not ok:
        return value, f"{key}: expected {expected(key, default)}, got {jsonio.dumps(value)}"
    return value, None


def _copied(v):
    """A deep copy of plain JSON data (`copy` costs the hook an import of its own on every run)."""
    if isinstance(v, dict):
        return {k: _copied(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copied(x) for x in v]
    return v


def load(fallbacks: "list | None" = None, env: "dict | None" = None) -> dict:
    """The defaults overlaid by settings.json. A value that fails its rule keeps the default;
    its dotted key is appended to `fallbacks` ("settings.json" when the file is unreadable or
    not a JSON object, "RECALLD_DEADLINE_MS" for a bad environment value). `env`: the
    environment to read instead of this process's (a hook run the daemon serves). Never raises."""
    merged = _copied(DEFAULTS)
    bad: list = []
    try:
        with open(paths.settings_path(), encoding="utf-8") as f:
            user = jsonio.loads(f.read())
    except FileNotFoundError:
        user = {}
    except (OSError, ValueError):
        user = None
    if isinstance(user, dict):
        _merge(merged, user, "", bad)
    else:
        bad.append("settings.json")
    env_deadline = (os.environ if env is None else env).get("RECALLD_DEADLINE_MS")
    if env_deadline:
        try:
            ok, value = _checked("deadline_ms", int(env_deadline), DEFAULTS["deadline_ms"])
        except ValueError:
            ok = False
        if ok:
            merged["deadline_ms"] = value
        else:
            bad.append("RECALLD_DEADLINE_MS")
    if fallbacks is not None:
        fallbacks.extend(bad)
    return merged


def _merge(base: dict, over: dict, prefix: str, bad: list) -> None:
    """Overlay `over` on the defaults in `base`, checking only what `over` holds (the defaults
    are valid), so the hook's read costs a few isinstance tests per user setting."""
    for k, v in over.items():
        key = prefix + k
        if k not in base:
            base[k] = v  # not a setting recalld reads; kept as before, `config set` refuses it
        elif isinstance(base[k], dict):
            if isinstance(v, dict):
                _merge(base[k], v, key + ".", bad)
            else:
                bad.append(key)
        else:
            ok, value = _checked(key, v, base[k])
            if ok:
                base[k] = value
            else:
                bad.append(key)


def save(values: dict) -> None:
    """Write the user's overrides (not the defaults) atomically."""
    import json  # `config set`, never the hook: jsonio has no indent

    path = paths.settings_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_overrides() -> dict:
    try:
        with open(paths.settings_path(), encoding="utf-8") as f:
            data = jsonio.loads(f.read())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
