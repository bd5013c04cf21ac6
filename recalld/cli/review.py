"""`recalld proposals review`: a person walks the pending drafts one by one, in a plain terminal.

One key per decision (a, e, r, s, q; Enter after it when stdin is not a terminal): approve
writes the memory, edit opens the draft in $EDITOR (then the same draft is asked again, so an
edit is followed by approve or reject), reject asks for the reason, skip leaves it pending,
quit stops. Every decision is durable when it is made (recalld.capture.decide), so quitting
loses nothing; the walk also remembers the last draft it showed per project (review.json under
RECALLD_HOME), and the next review starts after it, coming back to the skipped ones last.
"""

import datetime as dt
import json
import os
import sys

import click

from recalld.capture import decide
from recalld.core import paths

KEYS = {"a": "approve", "e": "edit", "r": "reject", "s": "skip", "q": "quit"}
PROMPT = "[a]pprove  [e]dit  [r]eject  [s]kip  [q]uit > "


def parse_age(value: "str | None") -> "dt.timedelta | None":
    """"30d", "12h", "45m", "2w" -> a timedelta; None for none."""
    if not value:
        return None
    v = value.strip().lower()
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if len(v) < 2 or not v[:-1].isdigit() or v[-1] not in units:
        raise click.BadParameter(f"{value!r}: use a number and a unit, like 30d, 12h, 45m or 2w")
    return dt.timedelta(**{units[v[-1]]: int(v[:-1])})


def select(conn, *, project, session=None, kind=None, older_than=None, limit: int = 10_000) -> list:
    """Open proposals matching the filters, oldest first."""
    rows = decide.list_(conn, project=project, session=session, states=decide.OPEN, limit=limit)
    if kind:
        rows = [p for p in rows if p["effective"]["kind"] == kind]
    if older_than is not None:
        cutoff = dt.datetime.now(dt.timezone.utc) - older_than
        rows = [p for p in rows if _time(p["time"]) <= cutoff]
    return rows


def _time(iso: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


# --- where the last review stopped ----------------------------------------------------------


def _cursor_path() -> str:
    return os.path.join(paths.home(), "review.json")


def load_cursor(project: "str | None") -> int:
    try:
        with open(_cursor_path(), encoding="utf-8") as f:
            return int(json.load(f).get(project or "*", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def save_cursor(project: "str | None", pid: int) -> None:
    path = _cursor_path()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[project or "*"] = pid
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def order(rows: list, after: int) -> list:
    """Drafts after the last one shown first, then the ones shown (and skipped) before."""
    return [p for p in rows if p["id"] > after] + [p for p in rows if p["id"] <= after]


# --- the walk -------------------------------------------------------------------------------


def _read_key() -> str:
    """One key from the terminal. Not click.getchar: its raw mode flushes pending input, so a
    key pressed while the previous decision was being written would be lost."""
    try:
        import termios
        import tty
    except ImportError:  # no termios (Windows): click's own
        return click.getchar()
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)  # keys one by one, Ctrl-C still interrupts
        data = os.read(fd, 32)
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, old)
    return data.decode("utf-8", "replace")[:1] if data else "q"


def _key() -> str:
    if sys.stdin.isatty():
        ch = _read_key()
        click.echo(ch if ch.isprintable() else "")
        return ch.lower()
    line = sys.stdin.readline()
    if not line:
        return "q"  # end of input: stop, keeping every decision made
    return (line.strip()[:1] or "?").lower()


def describe(p: dict, i: int, n: int) -> str:
    eff = p["effective"]
    src = os.path.basename(p["source"] or "") or "?"
    lines = f"line {p['window_from']}" if p["window_from"] == p["window_to"] else \
        f"lines {p['window_from']}-{p['window_to']}"
    out = [f"[{i}/{n}] p{p['id']} {eff['kind']}" + (" (edited)" if p["state"] == "edited" else "")
           + f" · drafted {p['time'][:10]} from {src} {lines}",
           f"    {eff['text']}"]
    if p.get("why"):
        out.append(f"    why: {p['why']}")
    return "\n".join(out)


def walk(conn, rows: list, *, project, session=None) -> dict:
    """Ask about each draft in turn; returns what was decided."""
    done = {"approved": 0, "edited": 0, "rejected": 0, "skipped": 0}
    for i, p in enumerate(rows, 1):
        while True:
            fresh = decide.get(conn, p["id"])
            if fresh is None or fresh["state"] not in decide.OPEN:
                break  # decided elsewhere meanwhile (the agent, another review)
            click.echo("\n" + describe(fresh, i, len(rows)))
            click.echo(PROMPT, nl=False)
            action = KEYS.get(_key())
            if action is None:
                click.echo("    one of a, e, r, s, q")
                continue
            if action == "quit":
                return {**done, "quit": True}
            if action == "skip":
                done["skipped"] += 1
                break
            try:
                if action == "approve":
                    d = decide.approve(conn, p["id"], actor="review", session=session)
                    click.echo(f"    approved p{p['id']} as m{d.memory['id']}")
                    for s in d.similar or []:
                        click.echo(f"    looks related: m{s['id']} ({s['relation']}): {s['text'][:100]}")
                    done["approved"] += 1
                    break
                if action == "edit":
                    text = click.edit(fresh["effective"]["text"] + "\n", require_save=True)
                    if text is None or not text.strip() or text.strip() == fresh["effective"]["text"].strip():
                        click.echo("    unchanged")
                        continue
                    decide.edit(conn, p["id"], text=text.strip(), actor="review", session=session,
                             reason="edited in review")
                    done["edited"] += 1
                    continue  # the same draft again: approve or reject what it now says
                reason = click.prompt("    reason", default="", show_default=False).strip()
                if not reason:
                    click.echo("    a rejection needs a reason")
                    continue
                decide.reject(conn, p["id"], reason, actor="review", session=session)
                click.echo(f"    rejected p{p['id']}")
                done["rejected"] += 1
                break
            except decide.ProposalError as e:
                click.echo(f"    {e}")
                break
            finally:
                save_cursor(project, p["id"])
        save_cursor(project, p["id"])
    return {**done, "quit": False}
