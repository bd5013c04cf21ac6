"""The hook as a client of the warm daemon (standard library only: the launcher runs this first).

A hook process that does its own work pays for it on every prompt and tool call: importing the
hook (~7 ms), opening the store (~2), loading the crystal index and the word table (~3), all
before the search (docs/architecture.md, "The hook's cost"). The daemon has all of that warm,
so when it listens on RECALLD_HOME/run/hook.sock the launcher hands it the run: the argument
vector, the input bytes, the directory and the RECALLD_* environment. The daemon runs the same
code (recalld.hook.run's begin / work / finish) on its own connection and sends the output; the
hook writes it to the agent and says so; only then does the daemon write the receipt, and the
hook exits once it is written (a held act's retry must find its hold).

    hook -> daemon   {"v": 2, "version", "uid", "argv", "cwd", "home", "env", "n"}\\n + n input bytes
    daemon -> hook   A <deadline ms>\\n        the daemon has taken the run (or R <why>\\n: refused)
    daemon -> hook   O <n>\\n + n output bytes
    hook -> daemon   K\\n  written to stdout   (F\\n: the write failed: the receipt says so)
    daemon -> hook   D\\n  the receipt is written

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

`_socket` rather than `socket`, as in recalld.hook.semantic: `socket` imports selectors and enum.
"""

import os
import sys

from recalld import __version__
from recalld.core import paths
from recalld.hook import MAX_INPUT

SOCKET_NAME = "hook.sock"
PROTOCOL = 2
# A daemon that has not taken the run this soon is busy with others or stuck: the hook does
# not queue behind it, it runs itself (under load that spreads the work over both).
CONNECT_S = 0.05
GRACE_S = 0.1  # past the daemon's deadline, for the answer to travel
DONE_S = 2.0  # for the receipt's commit (a store busy with other writers waits up to its busy timeout)
MAX_OUTPUT = 1 << 22
# The one act the daemon cannot run for the hook: a git hook's commit reads the repository
# with git in the hook's own directory, and its stdin may never reach EOF.
LOCAL_EVENTS = ("commit",)


def socket_path() -> str:
    return os.path.join(paths.home(), "run", SOCKET_NAME)


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


def serve(argv: list, data: bytes, write):
    """Have the daemon run this hook. None: it did (the output went to `write`, the daemon
    wrote the receipt). Unconfirmed: it did, and then the daemon did not say its receipt is
    written. Else a string, why not, and nothing was written anywhere: the caller runs it."""
    path = socket_path()
    uid = os.urandom(16).hex()  # the run's receipt's, whoever writes it
    try:
        import _socket

        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (ImportError, OSError):
        return "error: no unix sockets"
    try:
        from recalld.core import jsonio

        s.settimeout(CONNECT_S)
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            return "down"  # a socket file left by a daemon that died
        env = {k: v for k, v in os.environ.items() if k.startswith("RECALLD_")}
        head = {"v": PROTOCOL, "version": __version__, "uid": uid, "argv": argv, "cwd": os.getcwd(),
                "home": paths.home(), "env": env, "n": len(data)}
        s.sendall(jsonio.dumps(head, ensure_ascii=True).encode("ascii") + b"\n" + data)
        buf = bytearray()
        took = _line(s, buf)
        if took[:1] != b"A":
            return "refused: " + took[2:200].decode("utf-8", "replace")
        s.settimeout(int(took[2:]) / 1000 + GRACE_S)
        head = _line(s, buf)
        if head[:2] != b"O ":
            return "error: bad answer"
        n = int(head[2:])
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


class InputCut(Exception):
    """The input did not reach its end within the hook's deadline."""


def _deadline_s(argv: list) -> float:
    """The deadline the hook would run under, without reading settings (the daemon reads them):
    --deadline-ms, RECALLD_DEADLINE_MS, else the default; only bounds reading the input here."""
    for a, b in zip(argv, argv[1:] + [""]):
        v = b if a == "--deadline-ms" else a.split("=", 1)[1] if a.startswith("--deadline-ms=") else None
        if v is not None:
            break
    else:
        v = os.environ.get("RECALLD_DEADLINE_MS")
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
    if _event(argv) in LOCAL_EVENTS:
        return False, None, read_stdin
    try:
        os.stat(socket_path())
    except OSError:
        return False, None, read_stdin
    try:
        data = _read(read_stdin, _deadline_s(argv))
    except InputCut:
        return False, "timeout: input", None
    except Exception:  # no SIGALRM here: read as the in-process run reads
        return False, None, read_stdin

    def write(b: bytes) -> None:
        sys.stdout.buffer.write(b)
        sys.stdout.buffer.flush()

    why = serve(argv, data, write)
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


def launch(argv: list, before_run=None) -> None:
    """A hook process: served by the daemon, else run here (recalld.hook.run). Exits the
    process. `before_run`: called before the in-process run's imports (the launcher's)."""
    done, why, data = main(argv, read_stdin)
    if done:
        os._exit(0)
    if before_run is not None:
        before_run()
    from recalld.hook.run import main as run_main

    run_main(argv, data, exit_process=True, served=why)
