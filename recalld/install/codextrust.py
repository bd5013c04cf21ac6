"""Codex runs a user hook only once it is trusted (0.171.0: untrusted hooks are skipped without
a word). The trust lives in config.toml as `[hooks.state."<hooks.json>:<event>:<group>:<handler>"]
trusted_hash = "sha256:..."`, the hash Codex computes for the handler. recalld does not compute
it: it asks Codex, through `codex app-server` (JSON-RPC lines on stdio: initialize, initialized,
`hooks/list {"cwds": [...]}`), which lists each hook with its key, `currentHash` and
`trustStatus`.

Install asks about the hooks.json it is about to write, in a scratch CODEX_HOME (so planning
writes nothing of Codex's; the hash depends on the handler, not on the file's path: observed),
and maps the keys onto the real file. Doctor asks Codex in the real CODEX_HOME, so what it
reports is what Codex itself will do.
"""

import json
import os
import select
import shutil
import subprocess
import tempfile
import time

from recalld.install.entries import is_recalld_hook_command

TIMEOUT_S = 30  # app-server answers in about a second; the first start on a loaded machine is slower
TRUST_STEP = ("Codex runs hooks only once they are trusted: run `codex`, open /hooks and trust "
              "recalld's hooks (or install Codex and run `recalld install codex` again, which trusts them)")


class TrustError(Exception):
    """Codex could not be asked (not installed, failed, too slow): one line why."""


def executable() -> "str | None":
    """The `codex` a user would run: RECALLD_CODEX, else the one on PATH."""
    return os.environ.get("RECALLD_CODEX") or shutil.which("codex")


def list_hooks(codex: str, codex_home: str, cwd: str, timeout_s: float = TIMEOUT_S) -> list:
    """Codex's hooks/list for `cwd`, every hook it would consider, with its key, command,
    currentHash and trustStatus."""
    env = dict(os.environ, CODEX_HOME=codex_home)
    try:
        p = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    except OSError as e:
        raise TrustError(f"cannot run {codex} app-server: {e}") from None
    end = time.monotonic() + timeout_s
    buf = b""

    def send(msg):
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()

    def answer(mid):
        nonlocal buf
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("id") == mid:
                    if "error" in msg:
                        raise TrustError(f"codex app-server: {str(msg['error'])[:200]}")
                    return msg.get("result")
            left = end - time.monotonic()
            if left <= 0:
                raise TrustError(f"codex app-server did not answer within {timeout_s:g} s")
            ready, _, _ = select.select([p.stdout], [], [], left)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise TrustError("codex app-server exited without answering")
                buf += chunk

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"clientInfo": {"name": "recalld", "version": "1"}}})
        answer(1)
        send({"jsonrpc": "2.0", "method": "initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [cwd]}})
        result = answer(2) or {}
    except (OSError, ValueError) as e:
        raise TrustError(f"codex app-server: {e}") from None
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return [h for d in result.get("data") or [] if isinstance(d, dict)
            for h in d.get("hooks") or [] if isinstance(h, dict)]


def recalld_hooks(hooks: list, hooks_file: str) -> list:
    """(hook, the part of its key after the file) for recalld's hooks in `hooks_file`."""
    out = []
    for h in hooks:
        src, key = h.get("sourcePath"), h.get("key")
        if (isinstance(src, str) and isinstance(key, str) and key.startswith(src)
                and os.path.realpath(src) == os.path.realpath(hooks_file) and is_recalld_hook_command(h.get("command"))):
            out.append((h, key[len(src):]))
    return out


def planned_hashes(codex: str, hooks_text: str, hooks_file: str, cwd: str) -> dict:
    """{trust key of the real hooks file: Codex's hash} for recalld's hooks in `hooks_text`,
    asked of Codex in a scratch CODEX_HOME holding nothing but that file."""
    with tempfile.TemporaryDirectory(prefix="recalld-codex-") as home:
        path = os.path.join(home, "hooks.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(hooks_text)
        return {hooks_file + rest: h["currentHash"] for h, rest in recalld_hooks(list_hooks(codex, home, cwd), path)
                if isinstance(h.get("currentHash"), str)}


def status(codex_home: str, hooks_file: str, cwd: str) -> dict:
    """What Codex itself says of recalld's hooks here: how many, which are trusted."""
    codex = executable()
    out = {"checked": False, "codex": codex, "hooks": 0, "trusted": 0, "untrusted": [], "error": None}
    if not codex:
        out["error"] = "codex is not on PATH: cannot ask it whether recalld's hooks are trusted"
        return out
    try:
        mine = [h for h, _ in recalld_hooks(list_hooks(codex, codex_home, cwd), hooks_file)]
    except TrustError as e:
        out["error"] = str(e)
        return out
    out.update(checked=True, hooks=len(mine),
               trusted=sum(1 for h in mine if h.get("trustStatus") == "trusted"),
               untrusted=sorted(str(h.get("eventName")) for h in mine if h.get("trustStatus") != "trusted"))
    return out
