"""What the installed hook process loads, and the shortcuts that keep it small: the launcher
(`python -I -S recalld/hook/__main__.py`) imports none of the standard modules that cost the
hook most (json's re and enum, sqlite3's dbapi2 and datetime, functools' collections), and a
matched crystal's essence is read without parsing its file again, yet an edited file is seen."""

import json
import os
import subprocess
import sys

import pytest

from recalld.crystals import admin
from recalld import crystals
from recalld.core import db, receipts
from recalld.install import entries

# Never imported by the launched hook on these events (each cost it milliseconds a run).
COSTLY = {"json", "re", "enum", "datetime", "sqlite3", "functools", "collections", "signal", "zlib",
          "hashlib", "inspect", "typing", "pathlib", "dataclasses", "threading"}

# Runs the launcher as the installed command does, and prints sys.modules where it exits.
PROBE = (
    "import os, sys\n"
    "_exit = os._exit\n"
    "def report(code):\n"
    "    sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    "    _exit(code)\n"
    "os._exit = report\n"
    "sys.argv = [sys.argv[1], 'hook', *sys.argv[2:]]\n"
    "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'),\n"
    "     {'__name__': '__main__', '__file__': sys.argv[0], '__package__': None})\n"
)


def launch(event: str, data: dict, cwd) -> tuple:
    res = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, entries.LAUNCHER, event],
                         input=json.dumps(data).encode(), capture_output=True, cwd=str(cwd),
                         env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert res.returncode == 0
    lines = [x for x in res.stderr.decode().splitlines() if x.startswith("MODULES ")]
    assert len(lines) == 1, res.stderr.decode()
    return res.stdout.decode(), set(lines[0].split()[1:])


def crystal(essence: str, match: str = "git push --force") -> str:
    return (f"crystal:\non: bash\nmatch: {match}  # a comment\nstale_after: 2999-01-01\ndeliver: context\n\n"
            f"<!-- crystal:essence -->\n{essence}\n<!-- /crystal:essence -->\n")


@pytest.fixture
def store(home, project):
    from recalld import memories
    from recalld.core import scope

    conn = db.connect()
    sc = scope.Scope(scope.resolve_project(str(project)), "main")
    memories.remember(conn, "We deploy the ledger service with blue green switches on Fridays.", sc,
                      check_similar=False)
    d = project / ".recalld" / "crystals"
    d.mkdir(parents=True)
    (d / "push.md").write_text(crystal("⛔ FIRST-ESSENCE"), encoding="utf-8")
    admin.trust_project(sc.project)
    crystals.load_for(sc.project)  # the index cache, as the first act after a change writes it
    return project


def claude(project, event, **kw):
    return {"session_id": "s-cost", "cwd": str(project), "hook_event_name": event, **kw}


@pytest.mark.parametrize("event,data,outcome", [
    ("prompt-submit", lambda p: claude(p, "UserPromptSubmit", prompt="How do we deploy the Ledger service?"),
     "injected"),
    ("pre-tool", lambda p: claude(p, "PreToolUse", tool_name="Bash", tool_input={"command": "git push --force"}),
     "injected"),
    ("post-tool", lambda p: claude(p, "PostToolUse", tool_name="Read", tool_input={"file_path": "x"},
                                   tool_response="ok"), "nothing"),
    ("session-start", lambda p: claude(p, "SessionStart", source="startup"), "nothing"),
    # cue words of the redactor ("pass", "token", "key", a URL) but no secret: its gates say so
    # without `re`, which with the compiled patterns cost the stop hook ~3/4 of its own time
    ("stop", lambda p: claude(p, "Stop", stop_hook_active=False,
                              last_assistant_message="Done: the tests pass, the token budget and the key "
                                                     "points are in https://example.com/notes."), "nothing"),
])
def test_the_launched_hook_answers_without_the_costly_modules(store, event, data, outcome):
    out, loaded = launch(event, data(store), store)
    assert COSTLY & loaded == set()
    recs = receipts.read(db.connect(readonly=True))
    assert [(r["hook"], r["outcome"]) for r in recs] == [(event, outcome)]
    if outcome == "injected":
        ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
        assert ("FIRST-ESSENCE" in ctx) == (event == "pre-tool")


def test_an_edited_crystal_is_read_again_and_a_broken_one_is_not_delivered(store):
    data = claude(store, "PreToolUse", tool_name="Bash", tool_input={"command": "git push --force"})
    path = store / ".recalld" / "crystals" / "push.md"
    assert "FIRST-ESSENCE" in launch("pre-tool", data, store)[0]
    # edited in place (an editor that truncates and writes): the folder's mtime does not move
    with open(path, "r+", encoding="utf-8") as f:
        f.seek(0)
        f.write(crystal("⛔ SECOND-ESSENCE, LONGER"))
        f.truncate()
    admin.trust_project(str(store))
    out, _ = launch("pre-tool", dict(data, session_id="s-2"), store)
    assert "SECOND-ESSENCE" in out and "FIRST-ESSENCE" not in out
    path.write_text(crystal("⛔ THIRD").replace("<!-- /crystal:essence -->", ""), encoding="utf-8")
    admin.trust_project(str(store))
    out, _ = launch("pre-tool", dict(data, session_id="s-3"), store)
    assert out == ""
    r = receipts.read(db.connect(readonly=True), session="s-3")[0]
    assert r["detail"]["crystals"]["failed"] == 1


def test_an_essence_read_after_the_scan_sees_a_file_changed_since(store):
    idx = crystals.load_for(str(store))
    (c, _), = idx.match("bash", "git push --force")
    assert c.sig is not None and crystals.essence(c) == "⛔ FIRST-ESSENCE"
    path = store / ".recalld" / "crystals" / "push.md"
    path.write_text(crystal("⛔ CHANGED SINCE THE SCAN"), encoding="utf-8")
    os.utime(path, ns=(c.sig[0] + 10**9, c.sig[0] + 10**9))
    assert crystals.essence(c) == "⛔ CHANGED SINCE THE SCAN"  # parsed again: not the indexed file
    path.write_text("not a crystal any more", encoding="utf-8")
    assert crystals.essence(c) is None


def test_the_sqlite_stand_in_leaves_no_trace(tmp_path):
    code = ("import sys, runpy\n"
            "sys.argv = [sys.argv[1], 'hook', 'nonsense']\n"
            "import os\n_exit = os._exit\n"
            "def report(code):\n"
            "    import functools, _sqlite3\n"
            "    c = _sqlite3.connect(':memory:')\n"
            "    got = [c.execute('SELECT ?', (i % 3,)).fetchone()[0] for i in range(300)]\n"
            "    assert got == [i % 3 for i in range(300)]\n"
            "    assert functools.lru_cache.__module__ == 'functools' and sys.modules['functools'] is functools\n"
            "    sys.stderr.write('OK\\n')\n"
            "    _exit(code)\n"
            "os._exit = report\n"
            "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'),\n"
            "     {'__name__': '__main__', '__file__': sys.argv[0], '__package__': None})\n")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code, entries.LAUNCHER], capture_output=True,
                         cwd=str(tmp_path), env=dict(os.environ, RECALLD_HOME=str(tmp_path / "h")))
    assert res.returncode == 0 and res.stderr.decode().strip() == "OK", res.stderr.decode()
