"""The model worker: a child process that loads one GGUF and runs its calls for the daemon.

A native fault in a model (an instruction this CPU or hypervisor does not grant, a corrupt
file, a llama.cpp bug, the OOM killer) ends the process it happens in. The daemon therefore
never loads a model itself: recalld.daemon.models starts one of these per model file,

    python -m recalld.model.worker --fd N MODEL

and talks to it over a Unix socket pair (fd N), one frame per message: a 4-byte big-endian
length, then JSON. The worker loads the model once, sends a hello frame (the model's name and
load time, or the load's error), then answers call frames `{"id", "m", "a", "k"}` with
`{"id", "ok", "ms", "calls"}` or `{"id", "err": [class, message]}`. The calls that use the
model's context are queued to its one inference thread (recalld.model.runtime), which answers
them, so the judge's urgent calls still go before, and preempt, the proposer's background
ones; tokenizing is answered at once by the thread that reads the frames. The socket closing
(the daemon exited or died) ends the worker.

`--probe MODEL` (recalld doctor, recalld install) loads the model, makes one tiny call and
prints one JSON line: what a probe needs to say "works".

The worker raises its own oom_score_adj so that under memory pressure the kernel kills it, a
process the daemon restarts, rather than the daemon.
"""

import faulthandler
import json
import os
import socket
import struct
import sys
import threading
import time

HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20
METHODS = ("tokenize", "pieces", "count_tokens", "token_logprobs", "logliks", "generate_json")
# Linux: 1000 makes this the OOM killer's first choice; the daemon restarts it.
OOM_SCORE_ADJ = "1000"
PROBE_CONTEXT = "The capital of France is"
PROBE_CONTINUATION = " Paris."


class ProtocolError(Exception):
    """A frame that is not a length and that many bytes of JSON."""


def send(sock: socket.socket, obj, lock: "threading.Lock | None" = None) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes is over {MAX_FRAME}")
    if lock is None:
        sock.sendall(HEADER.pack(len(data)) + data)
        return
    with lock:
        sock.sendall(HEADER.pack(len(data)) + data)


def _exact(sock: socket.socket, n: int) -> "bytes | None":
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            if buf:
                raise ProtocolError(f"the stream ended inside a frame ({len(buf)} of {n} bytes)")
            return None
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket):
    """The next frame's object; None when the other side closed between frames."""
    head = _exact(sock, HEADER.size)
    if head is None:
        return None
    (n,) = HEADER.unpack(head)
    if n > MAX_FRAME:
        raise ProtocolError(f"frame length {n} is over {MAX_FRAME}")
    body = _exact(sock, n)
    if body is None:
        raise ProtocolError("the stream ended after a frame's length")
    try:
        return json.loads(body)
    except ValueError as e:
        raise ProtocolError(f"a frame is not JSON: {e}") from None


# ---------------------------------------------------------------- the child


def _prepare() -> None:
    # A fatal signal writes the Python stack to stderr (the worker's log) before the process
    # dies of it, so the daemon can quote where it happened.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(OOM_SCORE_ADJ)
    except OSError:
        pass  # not Linux, or not allowed: the daemon's RSS figures still say what it costs


def load(path: str):
    """The runtime for `path`: the fake one when a test asked for it (recalld.model.fake)."""
    from recalld.model import fake

    if fake.wanted():
        return fake.FakeRuntime(path)
    from recalld.model.runtime import Runtime

    return Runtime(path)


def _error(e: BaseException) -> list:
    return [type(e).__name__, str(e)[:2000]]


def serve(sock: socket.socket, path: str) -> int:
    lock = threading.Lock()
    t0 = time.perf_counter()
    try:
        rt = load(path)
    except Exception as e:
        send(sock, {"id": 0, "err": _error(e)}, lock)
        return 0
    send(sock, {"id": 0, "ok": {"name": rt.name, "model_path": rt.model_path, "pid": os.getpid(),
                                "n_threads": rt.n_threads,
                                "load_ms": round((time.perf_counter() - t0) * 1000, 1)}}, lock)

    def answer(rid, out, err):
        reply = ({"id": rid, "err": _error(err)} if err is not None
                 else {"id": rid, "ok": out, "ms": rt.model_ms, "calls": rt.calls})
        try:
            try:
                send(sock, reply, lock)
            except (ProtocolError, TypeError, ValueError) as e:
                send(sock, {"id": rid, "err": ["ProtocolError", f"the reply cannot be sent: {e}"]}, lock)
        except OSError:
            pass  # the daemon is gone; the receive loop sees the same and ends

    def handle(msg):
        rid = msg.get("id")
        try:
            m = msg.get("m")
            if m not in METHODS:
                raise ValueError(f"no such model call: {m!r}")
            out = getattr(rt, m)(*(msg.get("a") or ()), **(msg.get("k") or {}))
        except Exception as e:
            answer(rid, None, e)
            return
        answer(rid, out, None)

    # The calls that use the model's context are queued to its inference thread, which sends
    # the answer itself (Runtime.submit): no thread waits for them. Tokenizing needs no
    # context and is answered here, at once. A runtime without submit (the tests' fake) gets
    # a thread per call.
    submitted = set(getattr(rt, "SUBMITTED", ())) if hasattr(rt, "submit") else set()
    while True:
        try:
            msg = recv(sock)
        except (OSError, ProtocolError):
            return 1
        if msg is None:
            return 0  # the daemon closed its end: nothing more to do
        if not isinstance(msg, dict):
            answer(None, None, ProtocolError(f"a call frame is not an object: {type(msg).__name__}"))
            continue
        m = msg.get("m")
        if m in submitted:
            rid = msg.get("id")
            try:
                rt.submit(m, list(msg.get("a") or ()), dict(msg.get("k") or {}),
                          lambda out, err, rid=rid: answer(rid, out, err))
            except Exception as e:
                answer(rid, None, e)
        elif submitted and m in METHODS:
            handle(msg)
        else:
            threading.Thread(target=handle, args=(msg,), daemon=True).start()


def probe(path: str) -> dict:
    """Load `path`, score one short continuation, and say how long each took."""
    t0 = time.perf_counter()
    rt = load(path)
    t1 = time.perf_counter()
    lps = rt.token_logprobs(PROBE_CONTEXT, PROBE_CONTINUATION, timeout_s=30)
    t2 = time.perf_counter()
    if not isinstance(lps, list) or not lps or not all(isinstance(x, float) and x == x and x <= 0 for x in lps):
        raise ValueError(f"the model's log-probabilities are not numbers <= 0: {str(lps)[:100]}")
    return {"ok": True, "model": rt.name, "load_ms": round((t1 - t0) * 1000, 1),
            "call_ms": round((t2 - t1) * 1000, 1), "tokens": len(lps)}


def main(argv: "list | None" = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _prepare()
    if len(args) == 2 and args[0] == "--probe":
        try:
            out = probe(args[1])
        except Exception as e:
            out = {"ok": False, "error": _error(e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        return 0 if out["ok"] else 1
    if len(args) == 3 and args[0] == "--fd":
        sock = socket.socket(fileno=int(args[1]))
        try:
            return serve(sock, args[2])
        finally:
            sock.close()
    sys.stderr.write("usage: python -m recalld.model.worker (--fd N | --probe) MODEL\n")
    return 2


if __name__ == "__main__":
    # os._exit: the model's inference thread may be mid-call; nothing here needs cleaning up.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
