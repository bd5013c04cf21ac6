"""Settings: defaults overlaid by RECALLD_HOME/settings.json (standard library only).

Every value is checked against its declaration in SETTINGS, on write (`recalld config set` refuses a bad one) and on
read: the hook reads settings on every run, and one bad value (a string for a number, a null,
`deadline_ms: 0`, which would switch the deadline off) would make every hook fail before it
could write a receipt. So a bad value falls back to its default, and load() names the keys
that fell back so the hook's receipt can say so (`detail.settings_fallback`).
"""

import os

from recalld.core import jsonio, paths

# The agent's hard cap on one hook output string (Claude Code truncates at 10,000).
AGENT_OUTPUT_CAP = 10_000


class Setting:
    """One setting: its dotted key, default, type, inclusive range and meaning. Types: "int",
    "number" (int or float), "bool", "str", "str?" (a string or null), "str-list". The table
    below is the one declaration: it validates (`check`, `load`), documents (docs/settings.md)
    and feeds `recalld config keys`."""

    __slots__ = ("key", "default", "type", "low", "high", "meaning")

    def __init__(self, key: str, default, type: str, low=None, high=None, meaning: str = ""):
        self.key, self.default, self.type, self.low, self.high, self.meaning = key, default, type, low, high, meaning


SETTINGS = (
    # pre-step (prompt-submit), boot and tool acts: what may be injected, and the hook's deadline
    Setting('budget_chars', 4000, 'int', 0, AGENT_OUTPUT_CAP,
            'Characters the pre-step (prompt-submit) may inject, all memories together.'),
    Setting('item_cap_chars', 2000, 'int', 1, AGENT_OUTPUT_CAP,
            'The most one memory or crystal may take of a budget; a longer one is cut.'),
    Setting('max_results', 5, 'int', 1, 100,
            'Memories the pre-step injects at most (it searches three times as many and keeps those above'
            ' the floor).'),
    Setting('floor', 0.4, 'number', 0, 1,
            "The coverage score (the IDF-weighted share of the prompt's informative terms a memory holds,"
            " 0..1) a memory needs before the pre-step injects it whole (below it, it may be told: "
            "tells.*)."),
    Setting('boot_budget_chars', 2000, 'int', 0, AGENT_OUTPUT_CAP,
            'Characters the always-loaded memories may take at session start.'),
    Setting('tool_budget_chars', 4000, 'int', 0, AGENT_OUTPUT_CAP,
            "Characters a tool act (pre-tool, post-tool) may inject: its crystals and the judge's queued "
            "memories share it."),
    Setting('deadline_ms', 300, 'int', 1, 60_000,
            'How long a hook may run before it answers with what it has (fail open); RECALLD_DEADLINE_MS '
            'overrides it.'),
    # 25: what a served prompt at 100k memories on the loaded 2-core machine stays inside
    # (docs/evaluation.md, "The served prompt-submit hook at 100k"); without the daemon it costs one stat
    Setting('semantic_wait_ms', 25, 'int', 0, 60_000,
            "How long a prompt-submit hook waits for the daemon's embedding ranking before it answers "
            "lexically (from when it asks, before its own search); 0 switches that channel off, and "
            'without the daemon it costs one stat (docs/architecture.md, "The semantic pre-step").'),
    # tells (recalld/core/tiers.py): one line each for the candidates below the floor
    Setting('tells.whole', True, 'bool', None, None,
            'Deliver what clears the floor whole; false shows it as a tell instead (a line the agent '
            'opens with `recalld show ID` or the MCP tool `show`).'),
    Setting('tells.max', 4, 'int', 0, 10,
            "Tells per prompt (and per step from the judge's queue) at most: one line each for the next "
            "candidates below the floor; 0 switches tells off."),
    Setting('tells.chars', 44, 'int', 32, 400,
            'The characters of a tell line at most, its `[m12 tell] ` label included (the first line of a '
            'block adds how to open one): what a prompt with no answer costs is about tells.max such lines.'),
    Setting('tells.floor', 0.1, 'number', 0, 1.01,
            'The coverage score a candidate below the floor needs to be told (above 1: never by '
            'coverage).'),
    Setting('tells.min_cos', 0.1, 'number', -1, 1.01,
            'The embedding cosine (semantic channel on) at which a candidate below the floor is told '
            '(above 1: never by cosine).'),
    Setting('tells.judge_floor', 0.05, 'number', 0, 1.01,
            "The judge's probability at which a candidate below judge.threshold is queued as a tell for "
            "the next step (above 1: never)."),
    # receipts
    Setting('receipt_hash', False, 'bool', None, None,
            'Add a sha256 of the prompt to each receipt (off: receipts hold no payload).'),
    # the background pass (docs/judge.md)
    Setting('judge.threshold', 0.6, 'number', 0, 1,
            'The probability that a memory answers the need (recalld.judge.calibrated) at which the '
            'background judge passes it (docs/judge.md).'),
    Setting('judge.max_candidates', 5, 'int', 1, 50,
            'Search results the judge considers for one need.'),
    Setting('judge.max_pass', 1, 'int', 0, 10,
            'How many of the most probable candidates may pass at most; 0 passes nothing.'),
    Setting('judge.timeout_s', 20, 'number', 0.1, 600,
            'Seconds the model may spend on one judge pass; a candidate it has not read by then cannot '
            'pass.'),
    Setting('queue.expire_steps', 6, 'int', 1, 1000,
            'Hook runs of the session after which a queued (judged) memory that was not delivered '
            'expires.'),
    Setting('queue.expire_minutes', 30, 'number', 0, 10_080,
            'Minutes after which a queued memory that was not delivered expires.'),
    # models (recalld/model/resolve.py)
    Setting('models.judge', None, 'str?', None, None,
            'The judge\'s GGUF file; "off" disables the judge; null looks in RECALLD_MODEL, models/ '
            'directories, then the embedded default (recalld/model/resolve.py).'),
    Setting('models.proposer', None, 'str?', None, None,
            'The proposer\'s GGUF file, resolved as models.judge is; "off" leaves capture to its cue '
            'ranking.'),
    Setting('models.embedder', None, 'str?', None, None,
            'The sentence embedder: a bundle directory or .zip, "off", or null to find one '
            '(docs/embeddings.md).'),
    # capture (docs/capture.md)
    Setting('proposals.enabled', True, 'bool', None, None,
            'Whether turn boundaries propose memories and hooks show the drafts (docs/capture.md).'),
    Setting('proposals.max_drafts', 3, 'int', 0, 20,
            'Draft slots a capture pass has for every 2,500 characters said (at most 12).'),
    Setting('proposals.per_20_turns', 12, 'int', 0, 1000,
            "A session's drafts per 20 substantive turns at most (any session may draft one); 0 sets "
            "no budget."),
    Setting('proposals.model_weight', 0.0, 'number', 0, 10,
            "How far the proposer model's surprise moves a candidate's rank; 0 ranks by the cues alone "
            "and loads no model (docs/capture.md, \"Ranking\")."),
    Setting('proposals.min_chars', 40, 'int', 0, AGENT_OUTPUT_CAP,
            'The shortest draft kept, in characters.'),
    Setting('proposals.min_words', 6, 'int', 0, 1000,
            'The shortest draft kept, in words.'),
    Setting('proposals.max_chars', 600, 'int', 1, AGENT_OUTPUT_CAP,
            'The longest draft kept, in characters.'),
    Setting('proposals.min_confidence', 0.5, 'number', 0, 1,
            'The lowest model confidence at which a draft is kept.'),
    Setting('proposals.duplicate_ratio', 88, 'number', 0, 100,
            'A draft this similar (rapidfuzz ratio, 0..100) to a stored memory or another draft is '
            'dropped as a duplicate.'),
    Setting('proposals.min_grounding', 0.6, 'number', 0, 1,
            "The share of a draft's content words that must occur in what was said (a draft quotes, it "
            "never invents)."),
    Setting('proposals.timeout_s', 60, 'number', 0.1, 3600,
            'Seconds of model calls a capture pass may spend; after that it keeps the cue ranking.'),
    Setting('proposals.show_times', 2, 'int', 0, 100,
            'How many times a batch of undecided drafts is shown to the agent.'),
    Setting('proposals.show_max', 5, 'int', 0, 100,
            'Drafts shown per hook at most.'),
    Setting('proposals.review_gate', False, 'bool', None, None,
            'At a Claude Code or Gemini stop, block once per batch until its drafts are decided (off by '
            'default; never for Codex).'),
    # the daemon (docs/daemon.md)
    Setting('daemon.roots', [], 'str-list', None, None,
            "Transcript folders to tail besides the agents' own (~/.claude/projects, ~/.codex/sessions)."),
    Setting('daemon.recent_days', 2, 'number', 0, 3650,
            'A transcript never seen before is read only if it changed within this many days.'),
    Setting('daemon.autostart', False, 'bool', None, None,
            'The session-start hook starts the daemon when none runs (`recalld install` turns it on).'),
    Setting('daemon.rescan_s', 30, 'number', 1, 86_400,
            'Seconds between rescans of the roots, for what the file watcher missed.'),
    Setting('daemon.poll_s', 2, 'number', 0.05, 3600,
            'Seconds between polls of the roots when watchdog is not installed.'),
    Setting('daemon.live_s', 300, 'number', 0, 86_400,
            'Only a transcript written within this many seconds can raise a need (history read at start '
            'never does).'),
    Setting('daemon.debounce_s', 0.5, 'number', 0, 60,
            'Seconds a need waits for its session to go quiet (0.15 after a tool result).'),
    Setting('daemon.max_wait_s', 6.0, 'number', 0, 600,
            'The longest a need waits after its first trigger.'),
    Setting('daemon.min_pass_interval_s', 15, 'number', 0, 3600,
            'Seconds between two judge passes of one session at least.'),
    Setting('daemon.max_passes_per_minute', 6, 'int', 0, 600,
            'Judge passes a minute at most, all sessions together.'),
    Setting('daemon.need_window', 12, 'int', 1, 1000,
            'Transcript events of a session a need is built from.'),
    Setting('daemon.need_max_chars', 600, 'int', 1, 100_000,
            'The longest need (search query) a pass runs, in characters.'),
    Setting('daemon.preload_model', True, 'bool', None, None,
            'Load the judge model when the daemon starts, not at its first pass.'),
    Setting('daemon.load_allowance_s', 60, 'number', 0, 3600,
            'Extra seconds a pass may wait while the model is still loading.'),
    Setting('daemon.serve_hooks', 8, 'int', 0, 16,
            'Threads the daemon runs hooks on (RECALLD_HOME/run/hook.sock); 0 turns serving off and every'
            ' hook runs in its own process (docs/daemon.md).'),
    Setting('daemon.model_crash_limit', 3, 'int', 1, 100,
            "Model worker crashes (or hangs, or garbage answers) in a row after which a model file's "
            "roles are switched off until the file or the llama-cpp-python build changes "
            "(docs/daemon.md)."),
)


def _nested(table) -> dict:
    out: dict = {}
    for s in table:
        *groups, leaf = s.key.split(".")
        d = out
        for g in groups:
            d = d.setdefault(g, {})
        d[leaf] = s.default
    return out


# What the code reads: the defaults as nested JSON, and each leaf's (type, low, high).
DEFAULTS: dict = _nested(SETTINGS)
RULES: dict = {s.key: (s.type, s.low, s.high) for s in SETTINGS}
_TYPE_WORDS = {"int": "an integer", "number": "a number", "bool": "true or false", "str": "a string",
               "str?": "a string or null", "str-list": "a list of strings"}


def _rule(key: str, default) -> tuple:
    return RULES[key]


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
