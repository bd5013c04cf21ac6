"""The coding agents recalld serves: one adapter module each, listed in ADAPTERS.

Adding an agent means adding one adapter module plus its tests:
1. `recalld/agents/<agent>.py`: a subclass of `base.Adapter` that sets what the agent means
   (its native event names, tool names, pre-tool matcher, settings files and formats,
   transcript roots and record parser, how to tell its payloads apart) and an `ADAPTER`
   instance of it;
2. that instance in ADAPTERS below;
3. its cases in tests/test_agents.py (documented payloads, a transcript sample if it writes
   transcripts); the completeness and agreement checks there then cover it too.
The hook, `recalld install`, doctor and the daemon's tailer all ask these adapters: no other
module lists agents, events or tool names.

Standard library only: the hook imports this package on every run.
"""

from recalld.agents import claude_code, codex, gemini, git
from recalld.agents.base import EVENTS  # noqa: F401 (our events, which the adapters map onto)
from recalld.agents.base import COMMON_DELEGATE_TOOLS, COMMON_WRITE_TOOLS, NOT_MINE, Adapter

ADAPTERS = (claude_code.ADAPTER, codex.ADAPTER, gemini.ADAPTER, git.ADAPTER)

NAMES = tuple(a.name for a in ADAPTERS)  # ours: claude codex gemini git
INSTALL_NAMES = tuple(a.install_name for a in ADAPTERS if a.install_name)  # claude-code codex gemini
FALLBACK = next(a for a in ADAPTERS if a.fallback)
TRANSCRIPT_ADAPTERS = tuple(a for a in ADAPTERS if a.parse_record is not None)

# The act of a tool call does not depend on which agent made it: a name any agent uses counts.
BASH_TOOLS = frozenset().union(*(a.bash_tools for a in ADAPTERS))
WRITE_TOOLS = frozenset().union(COMMON_WRITE_TOOLS, *(a.write_tools for a in ADAPTERS))
DELEGATE_TOOLS = frozenset().union(COMMON_DELEGATE_TOOLS, *(a.delegate_tools for a in ADAPTERS))

_BY_NAME = {a.name: a for a in ADAPTERS}
_BY_ANY_NAME = {n: a for a in ADAPTERS for n in (a.name, a.install_name, *a.aliases) if n}
_BY_OWN_EVENT = {ev: a for a in ADAPTERS for ev in a.own_events}


def by_name(name) -> "Adapter | None":
    """The adapter for our agent name (claude, codex, gemini, git), else None."""
    return _BY_NAME.get(name)


def lookup(name) -> "Adapter | None":
    """The adapter for our name, its install name (claude-code) or an alias (claude_code)."""
    return _BY_ANY_NAME.get(name)


def owner_of_event(event: str) -> "Adapter | None":
    """The adapter that alone fires one of our events (git: commit), else None."""
    return _BY_OWN_EVENT.get(event)


def detect(payload: dict) -> Adapter:
    """The adapter surest that a hook payload is its agent's; FALLBACK when none claims it."""
    best, sure = FALLBACK, NOT_MINE
    for a in ADAPTERS:
        s = a.detect(payload)
        if s > sure:
            best, sure = a, s
    return best


def shell_owner(environ) -> "tuple | None":
    """(adapter, variable) when `environ` is an agent's tool shell, else None."""
    for a in ADAPTERS:
        for var in a.shell_markers:
            if environ.get(var):
                return a, var
    return None


def transcript_adapter(path: str, first: "dict | None" = None) -> Adapter:
    """The adapter whose transcript format a file is in (from its path and first record)."""
    for a in TRANSCRIPT_ADAPTERS:
        if not a.fallback and a.owns_transcript(path, first):
            return a
    return FALLBACK
