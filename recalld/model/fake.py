"""A fake model runtime, for tests only: what the model worker (recalld.model.worker) runs in
place of llama.cpp when RECALLD_TEST_FAKE_MODEL names a file.

The file holds one word, read again at the load and before every call, so a test can change
how the "model" behaves while the worker runs:

    ok        answers: a word of the continuation found in the context scores -0.5, another -4
    sigill    the process kills itself with SIGILL (what an AMX instruction the kernel does not
              grant does), sigsegv and sigkill likewise
    hang      never answers and never checks its deadline (a model stuck in native code)
    garbage   answers what no model answers (NaN and strings for log-probabilities)

`<word>:load` does it while loading instead (a load that crashes or hangs). Nothing outside
the tests sets this variable; recalld never reads the file otherwise.
"""

import os
import signal
import time
from pathlib import Path

ENV = "RECALLD_TEST_FAKE_MODEL"
MODES = ("ok", "sigill", "sigsegv", "sigkill", "hang", "garbage")
SIGNALS = {"sigill": signal.SIGILL, "sigsegv": signal.SIGSEGV, "sigkill": signal.SIGKILL}


def wanted() -> bool:
    return bool(os.environ.get(ENV))


def mode() -> tuple:
    """(what to do, whether at load), from the file RECALLD_TEST_FAKE_MODEL names."""
    try:
        word = Path(os.environ[ENV]).read_text(encoding="utf-8").strip() or "ok"
    except (KeyError, OSError):
        word = "ok"
    what, _, when = word.partition(":")
    if what not in MODES:
        raise ValueError(f"{ENV}: unknown mode {word!r} (one of {', '.join(MODES)})")
    return what, when == "load"


def _misbehave(what: str) -> bool:
    """Crash or hang as `what` says; True when the caller should answer garbage."""
    if what in SIGNALS:
        os.kill(os.getpid(), SIGNALS[what])
        time.sleep(5)  # the signal is delivered before this returns
    if what == "hang":
        while True:
            time.sleep(3600)
    return what == "garbage"


class FakeRuntime:
    """The methods of recalld.model.runtime.Runtime that the judge and the proposer call."""

    def __init__(self, model_path: str):
        self.model_path = str(model_path)
        self.name = "fake-" + os.path.basename(self.model_path)
        self.n_threads = 1
        self.calls = 0
        self.model_ms = 0.0
        what, at_load = mode()
        if at_load:
            _misbehave(what)

    def _act(self) -> bool:
        self.calls += 1
        what, at_load = mode()
        return False if at_load else _misbehave(what)

    def tokenize(self, text: str, bos: bool = False) -> list:
        if self._act():
            return "tokens"
        return list(range(int(bos) + len(text.split())))

    def pieces(self, text: str) -> list:
        if self._act():
            return 42
        return [" " + w for w in text.split()]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def token_logprobs(self, context: str, continuation: str, timeout_s=None) -> list:
        if self._act():
            return ["garbage", float("nan")]
        seen = set(context.lower().split())
        return [-0.5 if w.lower() in seen else -4.0 for w in continuation.split()]

    def logliks(self, context: str, continuations: list, timeout_s=None) -> list:
        if self._act():
            return "garbage"
        out = []
        for c in continuations:
            lps = self.token_logprobs(context, c)
            out.append((float(sum(lps)), len(lps)))
        return out

    def generate_json(self, prompt: str, schema: dict, **_kw):
        if self._act():
            return "{not json"
        return {}
