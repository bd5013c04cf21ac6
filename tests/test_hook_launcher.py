"""The hook's launcher (recalld/hook/__main__.py) and the command `recalld install` writes for it:
`<python> -I -S <package>/hook/__main__.py hook EVENT` runs the same hook as `recalld hook EVENT`,
without site or PYTHON* variables, and install still knows the entry as its own."""

import json
import os
import shlex
import subprocess
import sys

from recalld.core import db, receipts
from recalld.install import entries


def _script(tmp_path, shebang: str):
    p = tmp_path / "bin" / "recalld"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"#!{shebang}\nimport sys\nfrom recalld.entry import main\nsys.exit(main())\n")
    p.chmod(0o755)
    return str(p)


def test_a_console_script_of_this_interpreter_becomes_the_launcher(tmp_path):
    script = _script(tmp_path, sys.executable)
    cmd = entries.hook_command([script], "pre-tool", None)
    assert shlex.split(cmd) == [sys.executable, "-I", "-S", entries.LAUNCHER, "hook", "pre-tool"]
    assert entries.is_recalld_hook_command(cmd)
    assert entries.is_recalld_hook_command(entries.hook_command([script], "stop", "codex"))


def test_other_commands_are_written_as_given(tmp_path):
    other = _script(tmp_path, "/usr/bin/env python3")
    assert shlex.split(entries.hook_command([other], "stop", None)) == [other, "hook", "stop"]
    prefix = [sys.executable, "-m", "recalld"]
    assert shlex.split(entries.hook_command(prefix, "stop", None)) == [*prefix, "hook", "stop"]
    assert not entries.is_recalld_hook_command(f"{sys.executable} -I -S /tmp/other/__main__.py hook stop")


def test_the_launcher_runs_the_hook_bare_and_writes_one_receipt(home, project):
    data = {"session_id": "s-l", "cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    env = dict(os.environ, PYTHONPATH="/nonexistent", PYTHONDONTWRITEBYTECODE="1")
    argv = [sys.executable, "-I", "-S", entries.LAUNCHER, "hook", "prompt-submit"]
    res = subprocess.run(argv, input=json.dumps(data).encode(), capture_output=True, env=env, cwd="/")
    assert res.returncode == 0 and res.stderr == b""
    recs = receipts.read(db.connect(readonly=True), session="s-l")
    assert [(r["hook"], r["outcome"]) for r in recs] == [("prompt-submit", "nothing")]
