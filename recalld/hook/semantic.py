"""The hook's side of the semantic channel: ask the warm daemon for the pre-step ranking
(standard library only: it runs inside `recalld hook prompt-submit`).

The daemon (recalld/daemon/query.py) listens on a Unix socket, RECALLD_HOME/run/query.sock,
in a directory only the user can enter, the socket itself mode 0600; there is no TCP port. The
hook sends one JSON line, the prompt and the scope it resolved, before its own lexical search,
so the daemon embeds while the hook searches; then it waits at most `semantic_wait_ms` (and
never past its own deadline) for one JSON line back: memory ids, fused scores, which ranking
found each, and their cosines (a request without a floor gets the whole fused order). The ids are read back through the hook's own scope filter, so even a
confused daemon cannot put another project's memory into this context.

Whatever goes wrong, the hook keeps its own lexical result and the receipt says why
(`detail.recall`): `semantic`, or `lexical-fallback: down` (no socket, nobody listening),
`timeout`, or `error` (a broken answer). With no socket file the whole cost is one stat.

`_socket` (the C module under `socket`) rather than `socket`: `socket` imports selectors,
array and enum wrappers, ~3 ms on every prompt on the development machine, and the hook needs
none of them.
"""

import os

from recalld.core import jsonio, paths

SOCKET_NAME = "query.sock"
# Room left for what follows the answer (fetching the rows, packing, the receipt) when the
# wait is cut to the deadline.
RESERVE_S = 0.04
MAX_ANSWER = 1 << 20
MAX_SENT_CHARS = 64 * 1024  # the daemon embeds 256 word pieces; the lexical side reads the rest


def socket_dir() -> str:
    return os.path.join(paths.home(), "run")


def socket_path() -> str:
    return os.path.join(socket_dir(), SOCKET_NAME)


class Asked:
    """A question on its way: the connected socket (None once it failed) and its status."""

    __slots__ = ("sock", "status", "t0", "cos")

    def __init__(self, sock, status: str, t0: float):
        self.sock, self.status, self.t0 = sock, status, t0
        self.cos: dict = {}  # memory id -> the query's cosine, as the daemon measured it


class Found:
    """One memory the daemon ranked, read back through the hook's scope (Hit's fields the
    hook reads)."""

    __slots__ = ("id", "kind", "text", "tell", "score", "via")

    def __init__(self, id: int, kind: str, text: str, tell, score: float, via: str):
        self.id, self.kind, self.text, self.tell, self.score, self.via = id, kind, text, tell, score, via


def ask(text: str, sc, limit: int, floor: float, wait_s: float, now: float) -> Asked:
    """Send the question; never raises. `wait_s` bounds the connect and the send here and the
    answer in `answer` (a daemon that accepts nothing cannot hold the hook longer)."""
    try:
        os.stat(socket_path())
    except OSError:
        return Asked(None, "down", now)
    try:
        import _socket

        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (ImportError, OSError):
        return Asked(None, "error", now)
    try:
        s.settimeout(max(0.001, wait_s))
        s.connect(socket_path())
        req = {"v": 1, "q": text[:MAX_SENT_CHARS], "project": sc.project, "agent": sc.agent,
               "limit": int(limit), "floor": None if floor is None else float(floor)}
        s.sendall(jsonio.dumps(req, ensure_ascii=False).encode("utf-8", "replace") + b"\n")
    except (TimeoutError, BlockingIOError):  # BlockingIOError: its backlog is full, it is busy
        s.close()
        return Asked(None, "timeout", now)
    except OSError:  # refused or gone: a socket file left by a daemon that died
        s.close()
        return Asked(None, "down", now)
    return Asked(s, "asked", now)


def answer(asked: Asked, deadline: float, clock) -> "list | None":
    """[(memory id, score, via)] from the daemon, or None (and asked.status says why)."""
    s = asked.sock
    if s is None:
        return None
    try:
        left = deadline - clock()
        if left <= 0:
            asked.status = "timeout"
            return None
        s.settimeout(left)
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - clock()
            if left <= 0:
                asked.status = "timeout"
                return None
            s.settimeout(left)
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_ANSWER:
                asked.status = "error"
                return None
    except TimeoutError:
        asked.status = "timeout"
        return None
    except OSError:
        asked.status = "error"
        return None
    finally:
        s.close()
    try:
        data = jsonio.loads(buf)
        hits = data["hits"]
        out = [(int(i), float(sc), str(via)) for i, sc, via in hits]
        asked.cos = {int(k): float(v) for k, v in (data.get("cos") or {}).items()}
    except (ValueError, KeyError, TypeError):
        asked.status = "error"
        return None
    asked.status = "semantic"
    return out


def read_back(conn, sc, ranked: list) -> list:
    """The ranked ids as Found rows, in the daemon's order, only those this scope may read and
    that are current now (the hook's own filter, not the daemon's word)."""
    if not ranked:
        return []
    ids = [i for i, _, _ in ranked]
    where, params = sc.where()
    rows = conn.execute(f"SELECT id, kind, text, tell FROM memories WHERE id IN ({','.join('?' * len(ids))}) "
                        f"AND {where}", (*ids, *params)).fetchall()
    by_id = {r[0]: r for r in rows}
    return [Found(i, by_id[i][1], by_id[i][2], by_id[i][3], score, via)
            for i, score, via in ranked if i in by_id]


# --- the hook's two calls (recalld/hook/run.py's memory_items) -------------------------------


def start(ctx, limit: int, floor: "float | None") -> "Asked | None":
    """Ask before the lexical search; None when the channel is off (`semantic_wait_ms` 0).
    `floor` None: the whole fused order, every candidate, with the cosines."""
    import time

    wait_ms = int(ctx.cfg.get("semantic_wait_ms") or 0)
    if wait_ms <= 0:
        return None
    now = time.perf_counter()
    end = getattr(ctx, "end", None)
    wait_s = wait_ms / 1000
    if end is not None:
        wait_s = min(wait_s, end - now - RESERVE_S)
    if wait_s <= 0:
        return Asked(None, "timeout", now)
    asked = ask(ctx.hi.text, ctx.scope, limit, floor, wait_s, now)
    asked.t0 = now + wait_s  # from here on: the time the answer may arrive by
    return asked


def ranked(ctx, asked: Asked, lexical: list) -> list:
    """The daemon's fused ranking read back through this scope, or `lexical` unchanged."""
    import time

    got = answer(asked, asked.t0, time.perf_counter) if asked.sock is not None else None
    if got is None:
        ctx.detail["recall"] = f"lexical-fallback: {asked.status}"
        return lexical
    try:
        found = read_back(ctx.conn, ctx.scope, got)
    except Exception:  # sqlite3.Error, or ids the store cannot take: the lexical answer stands
        ctx.detail["recall"] = "lexical-fallback: error"
        return lexical
    ctx.detail["recall"] = "semantic"
    ctx.detail["via"] = [f.via for f in found]
    return found
