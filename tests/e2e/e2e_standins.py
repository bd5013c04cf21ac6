"""Scripted stand-ins for the three model APIs the real clients call, on 127.0.0.1.

Each stand-in logs every request body it receives (what reached the model is what the e2e
tests check) and answers the client's main requests from a script; side requests (title
generation, token counts, requests without tools) get a harmless reply and never consume a
step. Standard library only: http.server in a daemon thread, an ephemeral port.

A script is a list of steps. A step is `Text(...)`, `Tool(name, args)`, `Until(...)` (wait,
by a harmless tool call, until the request offers something), or a callable
`step(body, stand_in) -> Text | Tool`, which reads the request (for example the last tool
result) to decide. When the script runs out, the reply is `Text("done")`.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Text:
    def __init__(self, text):
        self.text = text


class Tool:
    """A tool call. `extra`: fields added to the API's call item as they are (for example
    Codex's `namespace` for a deferred MCP tool)."""

    def __init__(self, name, args, extra=None):
        self.name, self.args, self.extra = name, args, dict(extra or {})


class ToolSearch:
    """Codex only: a client-executed `tool_search` call, which loads deferred (MCP) tools."""

    def __init__(self, query, limit=8):
        self.query, self.limit = query, limit


class Until:
    """Answers `meanwhile` (a harmless tool call) while `ready(body)` is false, at most `tries`
    times; then the script goes on to the next step within the same request. For example: wait
    until a client's MCP tools are offered, which some clients do only once the server is up."""

    def __init__(self, ready, meanwhile, tries=5):
        self.ready, self.meanwhile, self.tries = ready, meanwhile, tries
        self.waited = 0


class Request:
    def __init__(self, n, method, path, body, main):
        self.n, self.method, self.path, self.body, self.main = n, method, path, body, main
        self.raw = json.dumps(body, ensure_ascii=False) if body is not None else ""


class StandIn:
    """Base: the HTTP server, the log and the script; subclasses speak one API."""

    def __init__(self, script=()):
        self.script = list(script)
        self.step = 0
        self.requests: list = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # --- what the tests read ---

    def main_requests(self):
        return [r for r in self.requests if r.main]

    def log_text(self):
        return "\n".join(f"#{r.n} {r.method} {r.path} main={r.main}\n{r.raw}" for r in self.requests)

    # --- scripting ---

    def next_step(self, body):
        with self.lock:
            while True:
                step = self.script[self.step] if self.step < len(self.script) else Text("done")
                if isinstance(step, Until):
                    if step.waited < step.tries and not step.ready(body):
                        step.waited += 1
                        return step.meanwhile
                    self.step += 1
                    continue
                self.step += 1
                break
        if callable(step):
            step = step(body, self)
        return step

    def tool_outputs(self, body) -> list:
        """The text of every tool result in one request body, in order."""
        raise NotImplementedError

    # --- per API ---

    def is_main(self, method, path, body) -> bool:
        raise NotImplementedError

    def answer(self, handler, path, body, main):
        raise NotImplementedError

    def _handler(self):
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # the request log is ours, not stderr's
                pass

            def _body(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    raw = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        raw += self.rfile.read(size)
                        self.rfile.readline()
                else:
                    n = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(n) if n else b""
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError:
                    return {"_raw": raw.decode("utf-8", "replace")}

            def _serve(self):
                body = self._body()
                main = stand_in.is_main(self.command, self.path, body)
                with stand_in.lock:
                    stand_in.requests.append(Request(len(stand_in.requests), self.command, self.path, body, main))
                try:
                    stand_in.answer(self, self.path, body, main)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = do_GET = do_PUT = _serve

            def send_json(self, obj, status=200):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def send_sse(self, events, sep=b"\n\n"):
                """`events`: (event name or None, data dict). Sent whole, then the connection closes."""
                chunks = []
                for name, data in events:
                    line = (f"event: {name}\n" if name else "") + "data: " + json.dumps(data)
                    chunks.append(line.encode() + sep)
                payload = b"".join(chunks)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.close_connection = True

        return Handler


# --- Anthropic Messages (Claude Code) ---------------------------------------------------------


class Anthropic(StandIn):
    def is_main(self, method, path, body):
        p = urlsplit(path).path
        return (method == "POST" and p == "/v1/messages" and isinstance(body, dict)
                and bool(body.get("tools")) and body.get("stream") is True)

    def answer(self, h, path, body, main):
        p = urlsplit(path).path
        if p.endswith("/count_tokens"):
            return h.send_json({"input_tokens": 100})
        if p != "/v1/messages" or not isinstance(body, dict):
            return h.send_json({"type": "error", "error": {"type": "not_found_error", "message": p}}, 404)
        step = self.next_step(body) if main else Text("ok")
        if not body.get("stream"):
            return h.send_json(self._message(step, body))
        h.send_sse(self._events(step, body))

    def tool_outputs(self, body):
        out = []
        for m in (body or {}).get("messages") or []:
            if m.get("role") != "user" or not isinstance(m.get("content"), list):
                continue
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    c = b.get("content")
                    out.append(c if isinstance(c, str) else json.dumps(c, ensure_ascii=False))
        return out

    def _content(self, step):
        if isinstance(step, Tool):
            return [{"type": "tool_use", "id": f"toolu_{self.step:04d}{int(time.time() * 1000) % 100000}",
                     "name": step.name, "input": step.args}], "tool_use"
        return [{"type": "text", "text": step.text}], "end_turn"

    def _message(self, step, body):
        content, stop = self._content(step)
        return {"id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant",
                "model": body.get("model", "claude"), "content": content, "stop_reason": stop,
                "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 10}}

    def _events(self, step, body):
        content, stop = self._content(step)
        msg = self._message(step, body)
        msg["content"], msg["stop_reason"] = [], None
        ev = [("message_start", {"type": "message_start", "message": msg})]
        block = content[0]
        if block["type"] == "text":
            ev += [("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": block["text"]}})]
        else:
            ev += [("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": dict(block, input={})}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "input_json_delta",
                                                      "partial_json": json.dumps(block["input"])}})]
        ev += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 10}}),
               ("message_stop", {"type": "message_stop"})]
        return ev


# --- OpenAI Responses (Codex) -----------------------------------------------------------------


class OpenAIResponses(StandIn):
    def is_main(self, method, path, body):
        return (method == "POST" and urlsplit(path).path.endswith("/responses") and isinstance(body, dict)
                and bool(body.get("tools")))

    def tool_outputs(self, body):
        out = []
        for item in (body or {}).get("input") or []:
            if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                o = item.get("output")
                out.append(o if isinstance(o, str) else json.dumps(o, ensure_ascii=False))
        return out

    def answer(self, h, path, body, main):
        p = urlsplit(path).path
        if p.endswith("/models"):
            return h.send_json({"object": "list", "data": [], "models": []})
        if not p.endswith("/responses") or not isinstance(body, dict):
            return h.send_json({"error": {"message": f"no such path {p}", "type": "not_found"}}, 404)
        step = self.next_step(body) if main else Text("ok")
        n = len(self.requests)
        if isinstance(step, ToolSearch):
            item = {"type": "tool_search_call", "id": f"tsc_{n}", "call_id": f"call_{n}", "execution": "client",
                    "status": "completed", "arguments": {"query": step.query, "limit": step.limit}}
        elif isinstance(step, Tool):
            if step.name == "apply_patch" and isinstance(step.args, str):
                # Codex offers apply_patch as a freeform (custom) tool: the patch is the input.
                item = {"type": "custom_tool_call", "id": f"ctc_{n}", "call_id": f"call_{n}",
                        "name": step.name, "input": step.args, "status": "completed"}
            else:
                item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": step.name,
                        "arguments": json.dumps(step.args), "status": "completed"}
            item.update(step.extra)
        else:
            item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}]}
        resp = {"id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "status": "in_progress",
                "model": body.get("model", "gpt"), "output": []}
        ev = [("response.created", {"type": "response.created", "response": resp}),
              ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                              "item": dict(item, status="in_progress")})]
        if item["type"] == "message":
            ev.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                      "output_index": 0, "content_index": 0, "delta": step.text}))
        ev.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                 "item": item}))
        done = dict(resp, status="completed", output=[item],
                    usage={"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                           "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110})
        ev.append(("response.completed", {"type": "response.completed", "response": done}))
        h.send_sse(ev)


# --- Gemini generateContent (Gemini CLI) ------------------------------------------------------


class Gemini(StandIn):
    def is_main(self, method, path, body):
        return (method == "POST" and ":streamGenerateContent" in path and isinstance(body, dict)
                and bool(body.get("tools")))

    def tool_outputs(self, body):
        out = []
        for c in (body or {}).get("contents") or []:
            for part in c.get("parts") or []:
                if isinstance(part, dict) and "functionResponse" in part:
                    out.append(json.dumps(part["functionResponse"].get("response"), ensure_ascii=False))
        return out

    def answer(self, h, path, body, main):
        p = urlsplit(path).path
        if p.endswith(":countTokens"):
            return h.send_json({"totalTokens": 100})
        if ":streamGenerateContent" not in p and ":generateContent" not in p:
            return h.send_json({"error": {"code": 404, "message": f"no such path {p}", "status": "NOT_FOUND"}}, 404)
        if main:
            step = self.next_step(body)
        else:
            # Side calls (next-speaker checks, routing, summaries) often ask for JSON.
            cfg = body.get("generationConfig") if isinstance(body, dict) else None
            wants_json = isinstance(cfg, dict) and "json" in str(cfg.get("responseMimeType", ""))
            # Every field the side calls seen here ask for (next speaker, model routing).
            answer = {"reasoning": "stand-in", "next_speaker": "user", "complexity_reasoning": "simple",
                      "complexity_score": 1}
            step = Text(json.dumps(answer) if wants_json else "ok")
        if isinstance(step, Tool):
            parts = [{"functionCall": {"name": step.name, "args": step.args}}]
        else:
            parts = [{"text": step.text}]
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
                 "modelVersion": "gemini-2.5-pro"}
        if ":streamGenerateContent" in p:
            h.send_sse([(None, chunk)], sep=b"\r\n\r\n")
        else:
            h.send_json(chunk)
