"""Plain functions and paths the tests share. Test modules import them from here
(`from tests.helpers import ...`); tests/conftest.py holds only fixtures and hooks, so pytest
is the one importer of conftest and it is loaded under one name."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The sibling checkout of shared data (../shared). A clean clone may not have it: tests that
# read it ask for the `shared_transcripts` fixture, which skips when it is absent.
SHARED = REPO.parent / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts" / "claude-code"
# Put first on PYTHONPATH for a test not marked `model`: its sitecustomize refuses a real model
# load in every Python subprocess the test starts (see conftest's pytest_runtest_setup).
MODEL_GUARD_DIR = Path(__file__).resolve().parent / "model_guard"
MODEL_GUARD_ENV = "RECALLD_TEST_MODEL_GUARD"
# A real GGUF is megabytes; the tests' stand-ins (a header and garbage) are far smaller.
REAL_MODEL_MIN_BYTES = 1 << 20


def run_recalld(args, stdin=b"", env=None, timeout=60):
    """Run the real CLI in a subprocess, the way an agent or user does."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    if isinstance(stdin, str):
        stdin = stdin.encode()
    return subprocess.run([sys.executable, "-m", "recalld", *args], input=stdin, capture_output=True,
                          env=e, timeout=timeout)


def payload(**kw) -> bytes:
    return json.dumps(kw).encode()


def is_real_model(path) -> bool:
    """Whether loading `path` would load a real model (a GGUF of model size), as opposed to the
    tests' broken stand-ins, which must still reach llama.cpp and fail there."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        return head == b"GGUF" and os.path.getsize(path) >= REAL_MODEL_MIN_BYTES
    except OSError:
        return False


def refusing_load(runtime_module, note_path: str):
    """A stand-in for `recalld.model.runtime.Runtime._load` that refuses a real model: the
    refusal is an LLMError (the code under test sees an unavailable model, as on a machine
    without one) and a line in `note_path`, which conftest turns into a failure of the test
    that asked for the load. Anything smaller still goes to llama.cpp and fails there."""
    original = runtime_module.Runtime._load

    def _load(self, *args, **kwargs):
        if is_real_model(self.model_path):
            with open(note_path, "a", encoding="utf-8") as f:
                f.write(f"pid {os.getpid()} tried to load {self.model_path}: {' '.join(sys.argv)[:200]}\n")
            raise runtime_module.LLMError(
                f"tests: {self.model_path} is a real model and this test is not marked model")
        return original(self, *args, **kwargs)

    return _load


def wait_for(fn, timeout=30.0, step=0.1):
    """fn()'s first true value within `timeout` seconds, else its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()
