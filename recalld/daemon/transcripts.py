"""Agent transcripts -> one normalized event stream.

Each agent's format (where its files live, what a record means) is its adapter's
(recalld/agents/: claude_code, codex); this module reads files and lines and hands each
decoded record to the adapter whose format the file is in. All formats are one JSON object
per line (field names from the agents' hook documentation and real transcripts they wrote).

Parsing never raises for bad data: a line that is not a JSON object is "malformed", counted
in the caller's ParseState and skipped. Records we have no use for (progress, snapshots,
summaries) parse to no events; that is not malformed.
"""

import io
import os
import re
from pathlib import Path
from typing import Iterator

from orjson import loads as _loads

from recalld import agents
from recalld.agents.base import Event, ParseState  # noqa: F401 (the daemon's names for them)

_SUBAGENT_FILE = re.compile(r"^agent-(.+)\.jsonl(?:\.zst)?$")


# --- format and file helpers ----------------------------------------------------------------


def is_transcript(path: "str | os.PathLike") -> bool:
    name = os.path.basename(str(path))
    return name.endswith(".jsonl") or name.endswith(".jsonl.zst")


def is_compressed(path) -> bool:
    return str(path).endswith(".zst")


def zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def guess_format(path, first: "dict | None" = None) -> str:
    """The adapter name of the file's format ("claude", "codex")."""
    return agents.transcript_adapter(str(path), first).name


def new_state(path) -> ParseState:
    """Initial state for a file: the session and agent its path implies."""
    p = Path(path)
    st = ParseState(source=str(path))
    name = p.name
    m = _SUBAGENT_FILE.match(name)
    if m:
        st.agent = f"agent-{m.group(1)}"
        # <session>/subagents/agent-<id>.jsonl: the session is the grandparent directory.
        if p.parent.name == "subagents":
            st.session = p.parent.parent.name
    else:
        stem = name[: -len(".jsonl.zst")] if name.endswith(".jsonl.zst") else name[: -len(".jsonl")] if name.endswith(".jsonl") else name
        if stem.startswith("rollout-"):
            # rollout-YYYY-MM-DDThh-mm-ss-<uuid>: the uuid is the last 5 dash groups
            parts = stem.split("-")
            st.session = "-".join(parts[-5:]) if len(parts) >= 6 else stem
        else:
            st.session = stem
    return st


def open_text(path) -> io.BufferedIOBase:
    """A binary stream of the file's lines, decompressed when it is .zst."""
    if is_compressed(path):
        import zstandard

        raw = open(path, "rb")
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return open(path, "rb")


# --- lines ------------------------------------------------------------------------------------


def parse_line(line: bytes, st: ParseState) -> "list[Event] | None":
    """One complete line (without or with its newline). None when malformed (counted)."""
    st.line_no += 1
    s = line.strip()
    if not s:
        return []
    try:
        # orjson: JSON decoding is a large share of the daemon's tailing time, and orjson does
        # it several times faster (docs/evaluation.md, "Tailing throughput"). It takes the bytes as
        # they are (invalid UTF-8 is a ValueError, like bad JSON) but not a BOM.
        obj = _loads(s[3:] if s.startswith(b"\xef\xbb\xbf") else s)
    except (ValueError, UnicodeDecodeError):
        st.malformed += 1
        return None
    if not isinstance(obj, dict):
        st.malformed += 1
        return None
    if st.fmt is None:
        st.fmt = guess_format(st.source, obj)
    try:
        return parse_record(obj, st.fmt, st)
    except (TypeError, AttributeError, KeyError, ValueError):
        # A record of a known type with an unexpected shape: skip it, like a bad line.
        st.malformed += 1
        return None


def parse_file(path) -> Iterator[Event]:
    """Every event of a whole file (either format, .zst when zstandard is importable)."""
    st = new_state(path)
    with open_text(path) as f:
        for line in io.BufferedReader(f) if is_compressed(path) else f:
            if not line.endswith(b"\n"):
                # a partial last line is not a record yet; a tailer waits for its newline
                break
            for ev in parse_line(line, st) or ():
                yield ev


def file_turns(path, unfinished: bool = False) -> list:
    """A whole file's turns (lists of events, without their turn-end records). A last turn
    with no turn-end yet is left out unless `unfinished`: the daemon waits for its end, while a
    finished session's last turn often has none."""
    turns, cur = [], []
    for ev in parse_file(path):
        if ev.kind == "turn_end":
            turns.append(cur)
            cur = []
        else:
            cur.append(ev)
    if unfinished and cur:
        turns.append(cur)
    return turns


def parse_record(obj: dict, fmt: str, state: ParseState) -> list:
    adapter = agents.by_name(fmt)
    if adapter is None or adapter.parse_record is None:
        adapter = agents.FALLBACK
    return adapter.parse_record(obj, state)
