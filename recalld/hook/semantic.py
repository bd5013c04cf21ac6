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


# Set by the daemon's query server (recalld/daemon/query.py) in its own process: a hook run
# that the daemon serves asks it directly, `LOCAL.ask(text, scope, limit, floor) -> job`, and
# `job.answer(conn, lexical hits, deadline)` gives the answer the socket would (or None when
# it is not ready by the deadline). A hook process never has it: it uses the socket.
LOCAL = None


class Asked:
    """A question on its way: the connected socket (None once it failed), or the in-process
    job, and its status."""

    __slots__ = ("sock", "status", "t0", "job", "cos")

    def __init__(self, sock, status: str, t0: float, job=None):
        self.sock, self.status, self.t0, self.job = sock, status, t0, job
        self.cos: dict = {}  # memory id -> the query's cosine, as the daemon measured it


class Found:
    """One memory of the daemon's ranking, read back through the hook's scope (Hit's fields the
    hook reads, and the fused order's evidence): `score` the receipt's figure (coverage plus
    the dense bonus), `via` "lexical" / "dense" / "both", `lexical` the coverage (None: lexical
    search did not find it), `cosine` (None: not scored densely), `key` the fused order's
    sorting key, `inject` whether it passes the injection gate at the floor."""

    __slots__ = ("id", "kind", "text", "tell", "score", "via", "lexical", "cosine", "key", "inject")

    def __init__(self, id: int, kind: str, text: str, tell, score: float, via: str, lexical=None,
                 cosine=None, key=None, inject=True):
        self.id, self.kind, self.text, self.tell, self.score, self.via = id, kind, text, tell, score, via
        self.lexical, self.cosine, self.key, self.inject = lexical, cosine, key, inject


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


def answer(asked: Asked, deadline: float, clock) -> "tuple | None":
    """(injectable [(memory id, score, via)], fused order) from the daemon's socket, or None (and
    asked.status says why)."""
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
        return _parsed(asked, jsonio.loads(buf))
    except ValueError:
        asked.status = "error"
        return None


def _parsed(asked: Asked, data) -> "tuple | None":
    """(injectable [(id, score, via)], fused order [(id, key, lexical, cosine, via, inject)])
    from an answer, or None (status "error") when it is not well formed."""
    try:
        out = [(int(i), float(sc), str(via)) for i, sc, via in data["hits"]]
        asked.cos = {int(k): float(v) for k, v in (data.get("cos") or {}).items()}
        order = [(int(i), float(k), None if lx is None else float(lx), None if c is None else float(c),
                  str(via), bool(inj)) for i, k, lx, c, via, inj in data.get("order") or ()]
    except (ValueError, KeyError, TypeError, AttributeError):
        asked.status = "error"
        return None
    asked.status = "semantic"
    return out, order


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


def read_back_order(conn, sc, order: list) -> list:
    """The fused order as Found rows, through this scope (as read_back)."""
    if not order:
        return []
    got = {f.id: f for f in read_back(conn, sc, [(i, key, via) for i, key, _, _, via, _ in order])}
    out = []
    for i, key, lexical, cosine, via, inject in order:
        f = got.get(i)
        if f is not None:
            f.lexical, f.cosine, f.key, f.inject = lexical, cosine, key, inject
            f.score = key
            out.append(f)
    return out


# --- the hook's two calls (recalld/hook/run.py's memory_items) -------------------------------


def start(ctx, limit: int, floor: "float | None") -> "Asked | None":
    """Ask before the lexical search; None when the channel is off (`semantic_wait_ms` 0).
    `floor` None: the whole fused order, every candidate, with the cosines (`asked.cos`)."""
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
    local = LOCAL
    if local is not None:  # served inside the daemon: ask its query server directly
        try:
            asked = Asked(None, "asked", now, local.ask(ctx.hi.text, ctx.scope, limit, floor))
        except Exception:
            asked = Asked(None, "error", now)
    else:
        asked = ask(ctx.hi.text, ctx.scope, limit, floor, wait_s, now)
    asked.t0 = now + wait_s  # from here on: the time the answer may arrive by
    return asked


def ranked(ctx, asked: Asked, lexical: list, hits: "list | None" = None) -> list:
    """The daemon's fused ranking read back through this scope (what may be injected), or
    `lexical` unchanged. `hits`: every lexical candidate (floor 0), which an in-process answer
    fuses instead of searching again. The whole fused order is kept for `order`."""
    import time

    got = None
    if asked.job is not None:
        try:
            raw = asked.job.answer(ctx.conn, hits, asked.t0)
            if raw is None:
                asked.status = "timeout"
                ctx.detail["semantic_ms"] = {"waited": getattr(asked.job, "waited_ms", None)}
            else:
                got = _parsed(asked, raw)
                ctx.detail["semantic_ms"] = raw.get("ms")  # waited, embed, cached, dense, fuse
        except Exception:  # the daemon's side failed: the lexical answer stands
            asked.status = "error"
    elif asked.sock is not None:
        got = answer(asked, asked.t0, time.perf_counter)
    if got is None:
        ctx.detail["recall"] = f"lexical-fallback: {asked.status}"
        return lexical
    try:
        found = read_back(ctx.conn, ctx.scope, got[0])
        ctx.semantic_order = read_back_order(ctx.conn, ctx.scope, got[1])
    except Exception:  # sqlite3.Error, or ids the store cannot take: the lexical answer stands
        ctx.detail["recall"] = "lexical-fallback: error"
        return lexical
    ctx.detail["recall"] = "semantic"
    ctx.detail["via"] = [f.via for f in found]
    return found


def order(ctx, hits: list, floor: float) -> list:
    """The fused order of this prompt's candidates, best first, as Found rows (fields above):
    the daemon's when it answered (`ranked`), else the lexical `hits` in their own order with
    no cosine (`key` their ranking key, `inject` whether they pass `floor`). The tells read
    this: the next candidates after what is injected, above a loose gate."""
    got = getattr(ctx, "semantic_order", None)
    if got is not None:
        return got
    return [Found(h.id, h.kind, h.text, h.tell, h.score, "lexical", lexical=h.score, cosine=None, key=h.rank,
                  inject=h.score >= floor) for h in hits]
