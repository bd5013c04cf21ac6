"""What each setting and environment variable means: the source of docs/settings.md and `recalld config keys`.

Kept apart from recalld.core.settings, which the hook imports on every prompt and tool call and
which has no use for these sentences. tests/test_docs.py fails when a setting has no meaning
here, when one here is not a setting, or when docs/settings.md is out of date.
"""

# One sentence or two per dotted key of settings.DEFAULTS, in the order the page lists them.
MEANINGS: dict = {
    "budget_chars": "Characters the pre-step (prompt-submit) may inject, all memories together.",
    "item_cap_chars": "The most one memory or crystal may take of a budget; a longer one is cut.",
    "max_results": "Memories the pre-step injects at most (it searches three times as many and keeps those above the floor).",
    "floor": "The coverage score (the IDF-weighted share of the prompt's informative terms a memory holds, 0..1) a memory needs before the pre-step injects it.",
    "boot_budget_chars": "Characters the always-loaded memories may take at session start.",
    "tool_budget_chars": "Characters a tool act (pre-tool, post-tool) may inject: its crystals and the judge's queued memories share it.",
    "deadline_ms": "How long a hook may run before it answers with what it has (fail open); RECALLD_DEADLINE_MS overrides it.",
    "semantic_wait_ms": "How long a prompt-submit hook waits for the daemon's embedding ranking before it answers lexically (from when it asks, before its own search); 0 switches that channel off, and without the daemon it costs one stat (docs/architecture.md, \"The semantic pre-step\").",
    "receipt_hash": "Add a sha256 of the prompt to each receipt (off: receipts hold no payload).",
    "judge.threshold": "The probability that a memory answers the need (recalld.judge.calibrated) at which the background judge passes it (docs/judge.md).",
    "judge.max_candidates": "Search results the judge considers for one need.",
    "judge.max_pass": "How many of the most probable candidates may pass at most; 0 passes nothing.",
    "judge.timeout_s": "Seconds the model may spend on one judge pass; a candidate it has not read by then cannot pass.",
    "queue.expire_steps": "Hook runs of the session after which a queued (judged) memory that was not delivered expires.",
    "queue.expire_minutes": "Minutes after which a queued memory that was not delivered expires.",
    "models.judge": "The judge's GGUF file; \"off\" disables the judge; null looks in RECALLD_MODEL, models/ directories, then the embedded default (recalld/model/resolve.py).",
    "models.proposer": "The proposer's GGUF file, resolved as models.judge is; \"off\" leaves capture to its cue ranking.",
    "models.embedder": "The sentence embedder: a bundle directory or .zip, \"off\", or null to find one (docs/embeddings.md).",
    "proposals.enabled": "Whether turn boundaries propose memories and hooks show the drafts (docs/capture.md).",
    "proposals.max_drafts": "Draft slots a capture pass has for every 2,500 characters said (at most 12).",
    "proposals.min_chars": "The shortest draft kept, in characters.",
    "proposals.min_words": "The shortest draft kept, in words.",
    "proposals.max_chars": "The longest draft kept, in characters.",
    "proposals.min_confidence": "The lowest model confidence at which a draft is kept.",
    "proposals.duplicate_ratio": "A draft this similar (rapidfuzz ratio, 0..100) to a stored memory or another draft is dropped as a duplicate.",
    "proposals.min_grounding": "The share of a draft's content words that must occur in what was said (a draft quotes, it never invents).",
    "proposals.timeout_s": "Seconds of model calls a capture pass may spend; after that it keeps the cue ranking.",
    "proposals.show_times": "How many times a batch of undecided drafts is shown to the agent.",
    "proposals.show_max": "Drafts shown per hook at most.",
    "proposals.review_gate": "At a Claude Code or Gemini stop, block once per batch until its drafts are decided (off by default; never for Codex).",
    "daemon.roots": "Transcript folders to tail besides the agents' own (~/.claude/projects, ~/.codex/sessions).",
    "daemon.recent_days": "A transcript never seen before is read only if it changed within this many days.",
    "daemon.autostart": "The session-start hook starts the daemon when none runs (`recalld install` turns it on).",
    "daemon.rescan_s": "Seconds between rescans of the roots, for what the file watcher missed.",
    "daemon.poll_s": "Seconds between polls of the roots when watchdog is not installed.",
    "daemon.live_s": "Only a transcript written within this many seconds can raise a need (history read at start never does).",
    "daemon.debounce_s": "Seconds a need waits for its session to go quiet (0.15 after a tool result).",
    "daemon.max_wait_s": "The longest a need waits after its first trigger.",
    "daemon.min_pass_interval_s": "Seconds between two judge passes of one session at least.",
    "daemon.max_passes_per_minute": "Judge passes a minute at most, all sessions together.",
    "daemon.need_window": "Transcript events of a session a need is built from.",
    "daemon.need_max_chars": "The longest need (search query) a pass runs, in characters.",
    "daemon.preload_model": "Load the judge model when the daemon starts, not at its first pass.",
    "daemon.load_allowance_s": "Extra seconds a pass may wait while the model is still loading.",
    "daemon.serve_hooks": "Threads the daemon runs hooks on (RECALLD_HOME/run/hook.sock); 0 turns serving off and every hook runs in its own process (docs/daemon.md).",
}

# The environment variables recalld reads, for the same page.
ENVIRONMENT: dict = {
    "RECALLD_HOME": "Where recalld keeps its store, settings, receipts and sockets (default $XDG_DATA_HOME/recalld, else ~/.local/share/recalld).",
    "RECALLD_AGENT": "The agent identity the process runs as (default \"main\"): its agent-scoped memories and crystals.",
    "RECALLD_SUBAGENT": "Outside a hook: the subagent type whose identity CLI writes and MCP calls use, as its hooks do.",
    "RECALLD_DEADLINE_MS": "Overrides the setting deadline_ms for this process (a bad value is ignored and the receipt says so).",
    "RECALLD_MODEL": "A GGUF file for the judge and the proposer when models.<role> is not set; \"off\" disables both.",
    "RECALLD_LLM_THREADS": "Threads a language model decodes on (default 1).",
    "RECALLD_EMBED_THREADS": "Threads for the embedder: BLAS threads of the numpy pass, intra-op threads of the onnxruntime one (default 1).",
    "RECALLD_EMBED_RUNTIME": "`numpy` runs the embedder's numpy pass even when onnxruntime and onnx are installed (otherwise the same pass runs as an onnxruntime graph; docs/embeddings.md).",
    "RECALLD_CODEX": "The codex binary `recalld install codex` trusts the hooks with (default: codex on PATH).",
}


def _leaves(d: dict, prefix: str = "") -> list:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _leaves(v, prefix + k + ".")
        else:
            out.append((prefix + k, v))
    return out


def keys() -> list:
    """[{key, type, default, meaning}] for every setting, in settings.DEFAULTS' order."""
    from recalld.core import settings

    return [{"key": k, "type": settings.expected(k, v), "default": v, "meaning": MEANINGS.get(k)}
            for k, v in _leaves(settings.DEFAULTS)]
