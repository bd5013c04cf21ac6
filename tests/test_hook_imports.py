"""The hook's sources ship with the package, so one that fails to import is a failure of the
run: exit 0, nothing printed, one `error` receipt naming it. Never a silent "nothing"."""

import json
import sys

import pytest

import recalld.hook
from recalld.core import db, receipts
from recalld.hook import run as hook


def broken(monkeypatch, module):
    """Make `from recalld.hook import <module>` raise, as a syntax error or a missing file would."""
    monkeypatch.delattr(recalld.hook, module, raising=False)
    monkeypatch.setitem(sys.modules, f"recalld.hook.{module}", None)


@pytest.mark.parametrize("module,event,native", [("crystal_source", "pre-tool", "PreToolUse"),
                                                 ("proposal_source", "stop", "Stop")])
def test_a_source_that_cannot_be_imported_gives_an_error_receipt(home, project, monkeypatch, capsys,
                                                                 module, event, native):
    data = {"session_id": "s-1", "cwd": str(project), "hook_event_name": native, "tool_name": "Bash",
            "tool_input": {"command": "git status"}, "stop_hook_active": False,
            "last_assistant_message": "Done."}
    broken(monkeypatch, module)
    assert hook.main([event], json.dumps(data).encode()) == 0
    assert capsys.readouterr().out == ""
    recs = receipts.read(db.connect())
    assert len(recs) == 1
    r = recs[0]
    assert (r["hook"], r["outcome"]) == (event, "error")
    assert r["error"].startswith("ModuleNotFoundError") and f"recalld.hook.{module}" in r["error"]


def test_the_same_run_with_its_sources_intact_answers(home, project):
    data = {"session_id": "s-1", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "git status"}}
    out, r = hook.run(["pre-tool"], json.dumps(data).encode())
    assert (out, r["outcome"], r["error"]) == ("", "nothing", None)


def test_the_acts_that_skip_a_source_import_are_the_acts_it_answers_nothing():
    from recalld import crystals
    from recalld.hook import proposal_source

    assert set(hook.CRYSTAL_ACTS) == set(crystals.ACTS)
    assert set(hook.PROPOSAL_ACTS) == set(proposal_source.SHOW_ACTS) | {"stop"}


def test_a_post_tool_without_crystals_or_drafts_imports_neither_source_nor_search(home, tmp_path):
    import subprocess

    data = {"cwd": str(tmp_path), "hook_event_name": "PostToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "x"}, "tool_response": "ok"}
    code = ("import sys, io; from recalld.hook import run; "
            "run.run(['post-tool'], sys.stdin.buffer.read()); "
            "print(sorted(m for m in sys.modules if m.startswith(('recalld', 're', 'json'))))")
    res = subprocess.run([sys.executable, "-c", code], input=json.dumps(data).encode(), capture_output=True,
                         check=True)
    loaded = res.stdout.decode()
    for mod in ("recalld.core.search", "recalld.hook.proposal_source"):
        assert mod not in loaded
