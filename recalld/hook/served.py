"""The hook as a client of the warm daemon (standard library only: the launcher runs this first).

A hook process that does its own work pays for it on every prompt and tool call: importing the
hook (~7 ms), opening the store (~2), loading the crystal index and the word table (~3), all
before the search (docs/architecture.md, "The hook's cost"). The daemon has all of that warm,
so when it listens on RECALLD_HOME/run/hook.sock the launcher hands it the run: the argument
vector, the input bytes, the directory and the RECALLD_* environment. The daemon runs the same
code (recalld.hook.run's begin / work / finish) on its own connection and sends the output; the
hook writes it to the agent and says so; only then does the daemon write the receipt, and the
hook exits once it is written (a held act's retry must find its hold, and after a tool's hook
the agent may start the next act's at once: it must see this one's deliveries).

    hook -> daemon   {"v": 3, "version", "uid", "argv", "cwd", "home", "env", "n"}\\n + n input bytes
    daemon -> hook   A <deadline ms>\\n        the daemon has taken the run (or R <why>\\n: refused)
    daemon -> hook   O <n>[ L]\\n + n output bytes   (L: the hook process may leave before D)
    hook -> daemon   K\\n  written to stdout   (F\\n: the write failed: the receipt says so)
    daemon -> hook   D\\n  the receipt is written

L is the daemon's to give, for a prompt and a session start that held nothing: the agent's next
hook of that session follows a model call, hundreds of milliseconds later, while the commit
takes about one (docs/evaluation.md). With L the hook process forks once K is sent; the parent
exits at once (the agent waits for it) and the child, off the agent's pipes and process group,
waits for D as the process otherwise would and writes the unconfirmed receipt when none comes
(below). A fork that fails: the process waits itself.

Until the hook sends K the daemon has written nothing, so whenever the exchange breaks before
that (no socket, nobody listening, the daemon busy past CONNECT_S, no output by its deadline, a
refusal: another version, its code changed on disk since it started, another RECALLD_HOME;
anything odd) the hook closes the socket, the daemon drops the run, and the hook runs
in-process as it always did: one receipt either way, and it says why the daemon did not serve
it (`detail.served`), except when no daemon listens at all (the ordinary case without one).
Once the output has arrived the run is the daemon's: running it again here would give the
agent the block twice. The receipt's uid is the hook process's (`uid` above), so when no D comes
(the daemon died after its output, or its commit took longer than DONE_S) the hook process
writes the run's receipt itself under that uid (`record_unconfirmed`): an error saying the
daemon did not confirm, its output's size, nothing counted as delivered. The uid is unique in
the store, so whichever of the two commits first is the run's one receipt.

Until it knows that no daemon serves, this module imports only what a bare `python -I -S`
start has already loaded or builds in (`sys`, `posix`, `_signal`) and `_socket`, plus the two
packages above it: `os`, `recalld.core.paths` and the JSON module cost a served run about 2 ms
of its ~5 (docs/evaluation.md). So the home directory and the request's JSON are made here,
from `posix`; a value this cannot write exactly as `os` and `json` would (a `~user` home, an
environment `posix` cannot decode) leaves the run to the process, as when no daemon listens.
`_socket` rather than `socket`, as in recalld.hook.semantic: `socket` imports selectors and enum.
"""

import sys

try:
    import posix
except ImportError:  # not POSIX: no daemon runs there (recalld/hook/autostart.py); the hook runs here
    posix = None

from recalld import __version__
from recalld.hook import MAX_INPUT

SOCKET_NAME = "hook.sock"
PROTOCOL = 3
# A daemon that has not taken the run this soon is busy with others or stuck: the hook does
# not queue behind it, it runs itself (under load that spreads the work over both).
CONNECT_S = 0.05
GRACE_S = 0.1  # past the daemon's deadline, for the answer to travel
DONE_S = 2.0  # for the receipt's commit (a store busy with other writers waits up to its busy timeout)
MAX_OUTPUT = 1 << 22
# The one act the daemon cannot run for the hook: a git hook's commit reads the repository
# with git in the hook's own directory, and its stdin may never reach EOF.
LOCAL_EVENTS = ("commit",)


class Unsure(Exception):
    """A value this module would have to guess at where `os` knows: the process runs the hook."""


def _env() -> dict:
    """os.environ as `os` builds it (the file system's encoding, surrogateescape)."""
    enc = sys.getfilesystemencoding()
    return {k.decode(enc, "surrogateescape"): v.decode(enc, "surrogateescape") for k, v in posix.environ.items()}


def _join(a: str, *parts: str) -> str:
    """os.path.join on POSIX."""
    for b in parts:
        a = b if b.startswith("/") else a + b if not a or a.endswith("/") else a + "/" + b
    return a


def _home(env: dict) -> str:
    """recalld.core.paths.home() for this environment (tests/test_hook_served.py holds them equal)."""
    v = env.get("RECALLD_HOME")
    if v:
        if v.startswith("~"):
            if not (v == "~" or v.startswith("~/")) or "HOME" not in env:
                raise Unsure("home")  # ~user, or no HOME: os asks the password database
            v = (env["HOME"].rstrip("/") + v[1:]) or "/"
        return v
    xdg = env.get("XDG_DATA_HOME")
    if not xdg:
        if "HOME" not in env:
            raise Unsure("home")
        xdg = _join(env["HOME"].rstrip("/") or "/", ".local", "share")
    return _join(xdg, "recalld")


def socket_path(env: "dict | None" = None) -> str:
    return _join(_home(_env() if env is None else env), "run", SOCKET_NAME)


def _q(s: str) -> str:
    """A JSON string as json.dumps(ensure_ascii=True) writes it."""
    if s.isascii() and s.isprintable():
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    import _json  # a control or non-ASCII character: the encoder json itself uses

    return _json.encode_basestring_ascii(s)


def _request(head: dict) -> bytes:
    """The request's first line: a flat object of str, int, a list of str and a str -> str dict."""
    out = []
    for k, v in head.items():
        if isinstance(v, str):
            v = _q(v)
        elif isinstance(v, int):
            v = str(int(v))
        elif isinstance(v, list):
            v = "[" + ", ".join(_q(x) for x in v) + "]"
        else:
            v = "{" + ", ".join(_q(a) + ": " + _q(b) for a, b in v.items()) + "}"
        out.append(_q(k) + ": " + v)
    return ("{" + ", ".join(out) + "}").encode("ascii")


def _event(argv: list) -> "str | None":
    it = iter(argv)
    for a in it:
        if a in ("--agent", "--deadline-ms"):
            next(it, None)
        elif not a.startswith("--"):
            return a
    return None


def _line(s, buf: bytearray) -> bytes:
    """One line from the socket (its timeout bounds each read); what follows it stays in buf."""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
        if len(buf) > 4096 and b"\n" not in buf:
            raise ValueError("no line")
    i = buf.index(b"\n")
    line = bytes(buf[:i])
    del buf[:i + 1]
    return line


def _exactly(s, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = s.recv(max(65536, n - len(buf)))
        if not chunk:
            raise EOFError
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


class Unconfirmed:
    """The daemon ran the hook and its output went to the agent (`ok`: the write succeeded), but
    no word came that its receipt is in the store (`why`)."""

    __slots__ = ("uid", "ok", "why", "n")

    def __init__(self, uid: str, ok: bool, why: str, n: int):
        self.uid, self.ok, self.why, self.n = uid, ok, why, n


def serve(argv: list, data: bytes, write, env: "dict | None" = None):
    """Have the daemon run this hook. None: it did (the output went to `write`, the daemon
    wrote the receipt). Unconfirmed: it did, and then the daemon did not say its receipt is
    written. Else a string, why not, and nothing was written anywhere: the caller runs it.
    `env`: this process's environment (_env)."""
    if posix is None:
        return "error: not POSIX"
    env = _env() if env is None else env
    try:
        home = _home(env)
        cwd = posix.getcwd()
    except (Unsure, OSError) as e:
        return f"error: {type(e).__name__}"
    path = _join(home, "run", SOCKET_NAME)
    uid = posix.urandom(16).hex()  # the run's receipt's, whoever writes it
    try:
        import _socket

        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (ImportError, OSError):
        return "error: no unix sockets"
    try:
        s.settimeout(CONNECT_S)
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            return "down"  # a socket file left by a daemon that died
        ours = {k: v for k, v in env.items() if k.startswith("RECALLD_")}
        head = {"v": PROTOCOL, "version": __version__, "uid": uid, "argv": argv, "cwd": cwd,
                "home": home, "env": ours, "n": len(data)}
        s.sendall(_request(head) + b"\n" + data)
        buf = bytearray()
        took = _line(s, buf)
        if took[:1] != b"A":
            return "refused: " + took[2:200].decode("utf-8", "replace")
        s.settimeout(int(took[2:]) / 1000 + GRACE_S)
        head = _line(s, buf).split(b" ")
        if head[0] != b"O" or len(head) not in (2, 3) or head[2:] not in ([], [b"L"]):
            return "error: bad answer"
        n = int(head[1])
        if not 0 <= n <= MAX_OUTPUT:
            return "error: bad answer"
        out = _exactly(s, buf, n) if n else b""
        ok = True
        if out:
            try:
                write(out)
            except (OSError, ValueError):
                ok = False
        try:
            s.settimeout(DONE_S)
            s.sendall(b"K\n" if ok else b"F\n")
            if head[2:] and _detach():
                return None  # the child waits for D
            done = _line(s, buf)
        except TimeoutError:
            return Unconfirmed(uid, ok, "timeout", n)
        except (OSError, EOFError, ValueError) as e:
            # From the output on the run is the daemon's, whatever happens: running it again here
            # would give the agent the block twice.
            return Unconfirmed(uid, ok, type(e).__name__, n)
        if done != b"D":
            return Unconfirmed(uid, ok, "bad answer", n)
        return None
    except TimeoutError:
        return "timeout"
    except (OSError, EOFError, ValueError) as e:
        return f"error: {type(e).__name__}"
    finally:
        s.close()


def _detach() -> bool:
    """Fork: True in the parent, which may exit now; False in the child, which goes on (off the
    agent's stdin, stdout, stderr and process group), and when the fork failed."""
    try:
        pid = posix.fork()
    except OSError:
        return False
    if pid:
        return True
    try:
        posix.setsid()  # out of the agent's process group: a kill of that group once the hook exits spares it
    except OSError:
        pass
    try:
        null = posix.open("/dev/null", posix.O_RDWR)
        for fd in (0, 1, 2):  # the agent reads the hook's output until every copy of its pipe is closed
            posix.dup2(null, fd)
    except OSError:
        pass
    return False


class InputCut(Exception):
    """The input did not reach its end within the hook's deadline."""


def _deadline_s(argv: list, env: dict) -> float:
    """The deadline the hook would run under, without reading settings (the daemon reads them):
    --deadline-ms, RECALLD_DEADLINE_MS, else the default; only bounds reading the input here."""
    for a, b in zip(argv, argv[1:] + [""]):
        v = b if a == "--deadline-ms" else a.split("=", 1)[1] if a.startswith("--deadline-ms=") else None
        if v is not None:
            break
    else:
        v = env.get("RECALLD_DEADLINE_MS")
    try:
        ms = int(v)
    except (TypeError, ValueError):
        ms = 300
    return min(max(ms, 1), 60_000) / 1000


def _read(read_stdin, seconds: float) -> bytes:
    import _signal

    def cut(signum, frame):
        raise InputCut()

    old = _signal.signal(_signal.SIGALRM, cut)
    _signal.setitimer(_signal.ITIMER_REAL, seconds)
    try:
        return read_stdin()
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, old)


def main(argv: list, read_stdin) -> tuple:
    """(True, None, None) when the daemon ran the hook. Else (False, why or None, input): the
    caller runs it in-process with `input` (the reader, or the bytes already read; None when
    reading them ran past the deadline) and puts `why` in the receipt. When no daemon listens
    nothing is read (one stat) and `why` is None."""
    if posix is None or _event(argv) in LOCAL_EVENTS:
        return False, None, read_stdin
    try:
        env = _env()
        posix.stat(socket_path(env))
    except (OSError, Unsure, UnicodeError):  # no daemon, or a home only `os` can work out: run here
        return False, None, read_stdin
    try:
        data = _read(read_stdin, _deadline_s(argv, env))
    except InputCut:
        return False, "timeout: input", None
    except Exception:  # no SIGALRM here: read as the in-process run reads
        return False, None, read_stdin

    def write(b: bytes) -> None:
        sys.stdout.buffer.write(b)
        sys.stdout.buffer.flush()

    why = serve(argv, data, write, env)
    if why is None:
        return True, None, None
    if isinstance(why, Unconfirmed):
        record_unconfirmed(argv, data, why)
        return True, None, None
    return False, why, data


def record_unconfirmed(argv: list, data: bytes, u: Unconfirmed) -> str:
    """The run's receipt, under the uid the daemon was given, when the daemon did not confirm its
    own: if the daemon's is in the store (its commit was only slow) the uid is taken and this
    one is not written. Returns where it went (recalld.core.receipts.record), or "error"."""
    try:
        import os

        from recalld.core import db, jsonio, receipts, scope
        from recalld.hook import payloads
        from recalld.hook import run as hook_run

        this_run = hook_run.begin(argv)
        receipt = this_run.receipt
        receipt.update(uid=u.uid, outcome="error", error="served: unconfirmed")
        # What reached the agent is known only as bytes: no item is counted as delivered.
        receipt["detail"].update(served=f"unconfirmed: {u.why}", output_bytes=u.n, stdout="written" if u.ok else "failed")
        try:
            payload = jsonio.loads(data)
            hi = payloads.normalize(this_run.event, payload, this_run.agent)
            receipt["act"], receipt["session"], receipt["agent"] = hi.act, hi.session, scope.resolve_agent(payload)
            receipt["project"] = scope.resolve(hi.cwd or os.getcwd(), payload).project
        except Exception:
            pass
        try:
            # the daemon may hold the write lock for this very receipt: wait for it, then its uid is taken
            conn = db.connect(busy_ms=2000)
        except Exception:
            conn = None
        receipt["duration_ms"] = None
        return receipts.record(conn, receipt)
    except Exception:
        return "error"


def read_stdin() -> bytes:
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return b""
        return sys.stdin.buffer.read(MAX_INPUT + 1)
    except (OSError, ValueError):
        return b""


def import_sqlite() -> None:
    """Import the _sqlite3 C module without importing functools.

    Its module init asks functools for `lru_cache`, only to build each connection's statement
    cache, and functools imports collections (whose namedtuple compiles source): about as many
    instructions as the rest of the hook's imports together. `functools.lru_cache(n)(f)` is the
    C wrapper `_functools._lru_cache_wrapper(f, n, False, CacheInfo)`, so the C module is handed
    exactly that; the stand-in leaves sys.modules as soon as the import returns, and a later
    `import functools` gets the real one. Anything unexpected: the plain import."""
    if "_sqlite3" in sys.modules or "functools" in sys.modules:
        return
    try:
        import _functools

        def lru_cache(maxsize=128, typed=False):
            size = max(0, maxsize) if isinstance(maxsize, int) else None  # as functools.lru_cache

            def decorating(fn):
                return _functools._lru_cache_wrapper(fn, size, typed, lambda *info: info)
            return decorating

        stand_in = type(sys)("functools")
        stand_in.lru_cache = lru_cache
        sys.modules["functools"] = stand_in
        try:
            import _sqlite3  # noqa: F401
        finally:
            if sys.modules.get("functools") is stand_in:
                del sys.modules["functools"]
    except Exception:
        sys.modules.pop("_sqlite3", None)


def launch(argv: list, before_run=None) -> None:
    """A hook process: served by the daemon, else run here (recalld.hook.run). Exits the
    process. `before_run`: called before the in-process run's imports (the launcher's)."""
    done, why, data = main(argv, read_stdin)
    if done:
        posix._exit(0)
    if before_run is not None:
        before_run()
    from recalld.hook.run import main as run_main

    run_main(argv, data, exit_process=True, served=why)
