"""How `recalld mcp` starts: ready for `tools/list` before the mcp SDK has loaded.

Clients send their first model request soon after they start, whether or not their MCP servers
have answered, and importing the mcp SDK takes most of a second; a server that waits for it is
missing from that first request (docs/evaluation.md, "MCP and the embedder"). So this module,
standard library only, reads the JSON-RPC lines on stdin itself and, while the SDK loads in a
thread, answers `initialize`, `ping` and `tools/list` from recalld/mcp/manifest.py, or, for a
client that opens with the stateless protocol of 2026-07-28 (it probes `server/discover` and
waits for it), `server/discover`, the three lists and the acknowledgement of
`subscriptions/listen`. The manifest holds the SDK's own answers for recalld's tools (generated
by `python3 -m recalld.mcp.stdio --write-manifest`; tests/test_mcp_startup.py fails when they
drift). Everything else (every tool call) is the SDK's: lines are relayed to the real MCPServer
of recalld/mcp/tools.py through a pipe, its answers written back, and once it is up every line
goes to it. The SDK saw the client's `initialize` too (its answer is dropped), so its session is
the client's. If the SDK cannot load, requests get a JSON-RPC error that says why.
"""

import io
import json
import os
import sys
import threading

MANIFEST_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.py")
INTERNAL_ERROR = -32603
EXIT_WAIT_S = 5  # after stdin closes, how long the SDK may take to answer what it was sent
# The stateless protocol's per-request envelope (2026-07-28): every request says its version.
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
MODERN_LISTS = {"prompts/list": "prompts_list", "resources/list": "resources_list", "tools/list": "tools_list"}
LISTEN_FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


class _Wire:
    """stdout, one whole JSON line per write, from any thread."""

    def __init__(self):
        self.fd = os.dup(1)
        self.lock = threading.Lock()

    def send(self, line: bytes) -> None:
        data = line if line.endswith(b"\n") else line + b"\n"
        with self.lock:
            while data:
                data = data[os.write(self.fd, data):]

    def reply(self, mid, result=None, error=None) -> None:
        msg = {"jsonrpc": "2.0", "id": mid}
        msg.update({"error": error} if error is not None else {"result": result})
        self.send(json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode())


class _Relay:
    """The SDK's server, loaded in a thread, fed through a pipe; its answers go to the wire,
    bar the ones this module already gave (`drop`)."""

    def __init__(self, root, wire: _Wire):
        self.root, self.wire = root, wire
        r, w = os.pipe()
        self._r, self._w = r, os.fdopen(w, "wb", buffering=0)
        self.ready = threading.Event()
        self.failed: "str | None" = None
        self.lock = threading.Lock()
        self.drop: set = set()  # ids of requests answered here, whose SDK answer is dropped
        self.drop_acks: set = set()  # subscriptions/listen ids whose acknowledgement was sent here
        self.pending: dict = {}  # id -> True for requests the SDK has not answered yet
        self.thread = threading.Thread(target=self._run, name="recalld-mcp-sdk", daemon=True)
        self.thread.start()

    def feed(self, raw: bytes, msg, drop: bool = False, acked: bool = False) -> None:
        mid = msg.get("id") if isinstance(msg, dict) and "method" in msg else None
        with self.lock:
            if acked:
                self.drop_acks.add(_key(mid))
            if self.failed is not None:
                if mid is not None and not drop:
                    self.wire.reply(mid, error={"code": INTERNAL_ERROR, "message": self.failed})
                return
            if mid is not None and drop:
                self.drop.add(_key(mid))
            elif mid is not None:
                self.pending[_key(mid)] = True
        try:
            self._w.write(raw if raw.endswith(b"\n") else raw + b"\n")
        except OSError:
            pass

    def answered(self, line: bytes) -> bool:
        """Whether the SDK's line goes to the wire (False for an answer given here)."""
        try:
            msg = json.loads(line)
        except ValueError:
            return True
        if isinstance(msg, dict) and msg.get("method") == "notifications/subscriptions/acknowledged":
            sid = ((msg.get("params") or {}).get("_meta") or {}).get(SUBSCRIPTION_ID)
            with self.lock:
                if _key(sid) in self.drop_acks:
                    self.drop_acks.discard(_key(sid))
                    return False
            return True
        if isinstance(msg, dict) and "method" not in msg and "id" in msg:
            with self.lock:
                k = _key(msg["id"])
                if k in self.drop:
                    self.drop.discard(k)
                    return False
                self.pending.pop(k, None)
        return True

    def close(self) -> None:
        try:
            self._w.close()
        except OSError:
            pass

    def _fail(self, why: str) -> None:
        with self.lock:
            self.failed = f"recalld mcp: the mcp SDK could not start ({why})"
            ids, self.pending = list(self.pending), {}
        for k in ids:
            self.wire.reply(json.loads(k), error={"code": INTERNAL_ERROR, "message": self.failed})

    def _run(self) -> None:
        try:
            import anyio
            from mcp.server.stdio import stdio_server

            from recalld.mcp.tools import build

            server = build(self.root)
            low = server._lowlevel_server  # what MCPServer.run_stdio_async serves, on our streams
        except Exception as e:  # a missing or broken SDK: every request says so
            self.ready.set()
            self._fail(f"{type(e).__name__}: {e}")
            return
        stdin = anyio.wrap_file(io.TextIOWrapper(os.fdopen(self._r, "rb"), encoding="utf-8", errors="replace"))
        stdout = anyio.wrap_file(_SdkOut(self))

        async def main():
            async with stdio_server(stdin, stdout) as (read, write):
                self.ready.set()
                await low.run(read, write, low.create_initialization_options())

        try:
            anyio.run(main)
        except Exception as e:
            self._fail(f"{type(e).__name__}: {e}")


class _SdkOut(io.TextIOBase):
    """The SDK's stdout: whole lines to the wire, bar answers already given."""

    def __init__(self, relay: _Relay):
        self.relay, self.buf = relay, ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            data = line.encode("utf-8")
            if line.strip() and self.relay.answered(data):
                self.relay.wire.send(data)
        return len(s)

    def flush(self) -> None:
        pass


def _key(mid) -> str:
    return json.dumps(mid)


def _initialize_result(manifest: dict, params) -> dict:
    """The SDK's answer to initialize: the client's protocol version if the SDK speaks it, else
    its latest (mcp.server.runner's negotiation), and the server's capabilities and info."""
    asked = params.get("protocolVersion") if isinstance(params, dict) else None
    version = asked if asked in manifest["versions"] else manifest["latest"]
    return dict(manifest["initialize"], protocolVersion=version)


def _modern_version(msg: dict, manifest: dict) -> bool:
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get(PROTOCOL_VERSION) in manifest["modern"]["versions"]


def _early_modern(wire: _Wire, relay: _Relay, raw: bytes, msg: dict, method, modern: dict) -> bool:
    """Answer a stateless request from the manifest while the SDK loads; False: the SDK's.
    discover and listen still reach the SDK (their answers here stand in for its own: the
    listen subscription must be the SDK's, which will hold it)."""
    if not _modern_version(msg, {"modern": modern}):
        return False
    params = msg.get("params") or {}
    if method == "server/discover":
        wire.reply(msg["id"], modern["discover"])
        relay.feed(raw, msg, drop=True)
        return True
    if method in MODERN_LISTS and not params.get("cursor"):
        wire.reply(msg["id"], modern[MODERN_LISTS[method]])
        return True
    if method == "subscriptions/listen":
        wanted = params.get("notifications")
        # Only the plain list-changed flags: the SDK echoes those it honours (all of them);
        # anything else (resource URIs, extensions) waits for the SDK's own answer.
        if not isinstance(wanted, dict) or any(k not in LISTEN_FLAGS or not isinstance(v, bool)
                                               for k, v in wanted.items()):
            return False
        honored = {k: True for k in LISTEN_FLAGS if wanted.get(k)}
        wire.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                              "params": {"_meta": {SUBSCRIPTION_ID: msg["id"]}, "notifications": honored}},
                             separators=(",", ":"), ensure_ascii=False).encode())
        relay.feed(raw, msg, acked=True)
        return True
    return False


def serve(root: "str | None" = None, stdin=None) -> None:
    from recalld.mcp.manifest import MANIFEST

    wire = _Wire()
    relay = _Relay(root, wire)
    src = stdin or sys.stdin.buffer
    initialized = False
    early = True  # answer early only a client that opens with a handshake it knows (see below)
    modern = False  # the client opened with server/discover in a version the manifest holds
    for raw in iter(src.readline, b""):
        if not raw.strip():
            continue
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None  # the SDK answers a line that is not JSON the way the protocol says
        method = msg.get("method") if isinstance(msg, dict) else None
        if early and not initialized and not modern and method != "initialize":
            # A client that opens otherwise negotiates with the SDK itself: two voices answering
            # one session would disagree on its protocol. The stateless protocol is the
            # exception: no session, and every request names its version.
            modern = method == "server/discover" and _modern_version(msg, MANIFEST)
            early = modern
        if early and not relay.ready.is_set() and isinstance(msg, dict) and "id" in msg:
            if modern:
                if _early_modern(wire, relay, raw, msg, method, MANIFEST["modern"]):
                    continue
            elif method == "initialize" and not initialized:
                wire.reply(msg["id"], _initialize_result(MANIFEST, msg.get("params")))
                relay.feed(raw, msg, drop=True)
                initialized = True
                continue
            elif initialized and method in ("tools/list", "ping") and not (msg.get("params") or {}).get("cursor"):
                wire.reply(msg["id"], MANIFEST["tools_list"] if method == "tools/list" else {})
                continue
        relay.feed(raw, msg)
    relay.close()
    relay.thread.join(EXIT_WAIT_S)


def main(argv: list) -> int:
    """`recalld mcp [--project DIR]`, parsed here so that startup imports nothing else."""
    root = None
    it = iter(argv)
    for a in it:
        if a in ("--project", "--cwd"):
            root = next(it, None)
        elif a.startswith(("--project=", "--cwd=")):
            root = a.split("=", 1)[1]
        else:
            return -1  # anything else (--help, a typo): the click command answers it
    if root is not None and not os.path.isdir(root):
        return -1
    serve(root)
    return 0


# --- the manifest ----------------------------------------------------------------------------


SDK_PROBE = """
import json, sys
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
print(json.dumps({"versions": list(HANDSHAKE_PROTOCOL_VERSIONS), "latest": LATEST_HANDSHAKE_VERSION,
                  "modern": list(MODERN_PROTOCOL_VERSIONS)}))
"""


def sdk_answers(requests: list, cwd: "str | None" = None) -> list:
    """The SDK server's own answers (recalld.mcp.tools.build().run(), no fast path) to `requests`."""
    import subprocess

    code = "import sys; from recalld.mcp.tools import build; build(sys.argv[1] if len(sys.argv) > 1 else None).run()"
    p = subprocess.Popen([sys.executable, "-c", code, *([cwd] if cwd else [])], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd)
    p.stdin.write("".join(json.dumps(r) + "\n" for r in requests).encode())
    p.stdin.flush()
    out = []
    try:  # stdin stays open until every request is answered: at EOF the SDK drops what is in flight
        while len(out) < sum(1 for r in requests if "id" in r):
            line = p.stdout.readline()
            if not line:
                break
            out.append(json.loads(line))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    return sorted(out, key=lambda m: str(m.get("id")))


def manifest_from_sdk() -> dict:
    import subprocess

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "0000-00-00", "capabilities": {}, "clientInfo": {"name": "m", "version": "0"}}}
    answers = sdk_answers([init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                           {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])
    by_id = {m["id"]: m["result"] for m in answers if "result" in m}
    versions = json.loads(subprocess.run([sys.executable, "-c", SDK_PROBE], capture_output=True, text=True,
                                         check=True).stdout)
    result = dict(by_id[1])
    assert result.pop("protocolVersion") == versions["latest"]
    modern = {"versions": versions["modern"]}
    for version in versions["modern"]:
        got = {m["id"]: m.get("result", m.get("error")) for m in sdk_answers(modern_requests(version))}
        answers = {"discover": got[1], "prompts_list": got[2], "resources_list": got[3], "tools_list": got[4]}
        # one answer for every modern version, or the fast path would need one per version
        assert modern.setdefault("answers", answers) == answers, version
    modern.update(modern.pop("answers", {}))
    return {"versions": versions["versions"], "latest": versions["latest"], "initialize": result,
            "tools_list": by_id[2], "modern": modern}


def modern_requests(version: str, client=None) -> list:
    """server/discover and the three lists in the stateless protocol's envelope."""
    meta = {PROTOCOL_VERSION: version,
            "io.modelcontextprotocol/clientInfo": client or {"name": "m", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    return [{"jsonrpc": "2.0", "id": i, "method": m, "params": {"_meta": meta}}
            for i, m in enumerate(("server/discover", "prompts/list", "resources/list", "tools/list"), 1)]


def manifest_source(manifest: dict) -> str:
    import pprint

    return ('"""What the mcp SDK answers for recalld\'s server: generated by `python3 -m recalld.mcp.stdio '
            '--write-manifest`\n(recalld/mcp/stdio.py says why); tests/test_mcp_startup.py checks it against the SDK."""\n\n'
            f"MANIFEST = {pprint.pformat(manifest, width=110, sort_dicts=True)}\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-manifest"]:
        with open(MANIFEST_PATH, "w", encoding="utf-8") as f:
            f.write(manifest_source(manifest_from_sdk()))
        print(f"wrote {MANIFEST_PATH}")
    else:
        sys.exit(main(sys.argv[1:]) or 0)
