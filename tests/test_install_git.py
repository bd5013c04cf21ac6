"""The git pre-commit hook: chaining an existing hook (its status still decides), core.hooksPath,
a hook in another language, a broken or missing recalld never blocking a commit, and the one
stop recalld makes on purpose (a `deliver: gate` crystal holds a commit once)."""

import os
import shlex
import subprocess
import sys

from recalld.core import receipts
from recalld.install import githook
from tests.helpers import REPO, run_recalld
from tests.test_install import PREFIX, user  # noqa: F401 (the fixture)



def git(repo, *args, check=True, env=None):
    e = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@x", PYTHONPATH=str(REPO))
    if env:
        e.update(env)
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check, env=e,
                          timeout=60)


def commit_receipts():
    from recalld.core import db

    return receipts.read(db.connect(readonly=True), hook="commit")


USER_HOOK = """#!/bin/sh
# like husky and pre-commit, look at $0 to know which hook this is
echo "ran as $(basename "$0") status=${HOOK_STATUS:-0}" >> "$(git rev-parse --git-dir)/user-hook.log"
exit ${HOOK_STATUS:-0}
"""


def test_git_hook_chains_an_existing_hook_and_never_blocks(user, project):
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text(USER_HOOK)
    hook.chmod(0o755)
    res = run_recalld(["install", "git-hook", "--cwd", str(project), "--command", shlex.join(PREFIX)])
    assert res.returncode == 0, res.stderr
    chained = project / ".git" / "hooks" / githook.GIT_CHAINED
    assert chained.read_text() == USER_HOOK and githook.GIT_MARKER in hook.read_text()

    (project / "a.txt").write_text("a\n")
    git(project, "add", "a.txt")
    out = git(project, "commit", "-m", "one")
    assert out.returncode == 0
    log = (project / ".git" / "user-hook.log").read_text().splitlines()
    assert log == ["ran as pre-commit status=0"]  # the user's hook ran, and still saw its own name
    recs = commit_receipts()
    assert len(recs) == 1 and recs[0]["act"] == "commit"

    # the user's hook still decides: it fails, the commit fails, with its status
    (project / "b.txt").write_text("b\n")
    git(project, "add", "b.txt")
    out = git(project, "commit", "-m", "two", check=False, env={"HOOK_STATUS": "3"})
    assert out.returncode != 0
    assert git(project, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert len(commit_receipts()) == 1  # recalld does not run for a commit that is not happening

    # idempotent
    before = hook.read_bytes()
    assert not githook.install_git_hook(project, PREFIX)[0].changed and hook.read_bytes() == before

    res = run_recalld(["uninstall", "git-hook", "--cwd", str(project)])
    assert res.returncode == 0, res.stderr
    assert hook.read_text() == USER_HOOK and os.access(hook, os.X_OK) and not chained.exists()


def test_a_broken_or_missing_recalld_never_blocks_a_commit(user, project, tmp_path):
    broken = tmp_path / "bin" / "recalld"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 2\n")
    broken.chmod(0o755)
    commands = ([str(broken)], [str(tmp_path / "nowhere" / "recalld")], [sys.executable, "-m", "nosuchmodule"])
    for i, command in enumerate(commands):
        githook.install_git_hook(project, command)
        f = project / f"f{i}.txt"
        f.write_text("x\n")
        git(project, "add", f.name)
        assert git(project, "commit", "-m", f"commit {command}", check=False).returncode == 0
    githook.uninstall_git_hook(project)
    assert not (project / ".git" / "hooks" / "pre-commit").exists()


def test_git_hook_honours_core_hooks_path_and_a_python_hook(user, project):
    git(project, "config", "core.hooksPath", ".githooks")
    hooks = project / ".githooks"
    hooks.mkdir()
    py = hooks / "pre-commit"
    py.write_text(f"#!{sys.executable}\nimport pathlib, sys\n"
                  "pathlib.Path('.git/py-hook.log').write_text(sys.argv[0])\n")
    py.chmod(0o755)
    sub = project / "sub"
    sub.mkdir()
    githook.install_git_hook(sub, PREFIX)
    assert githook.GIT_MARKER in py.read_text() and not (project / ".git" / "hooks" / "pre-commit").exists()
    (project / "c.txt").write_text("c\n")
    git(project, "add", "c.txt")
    assert git(project, "commit", "-m", "c").returncode == 0
    assert (project / ".git" / "py-hook.log").exists()
    assert len(commit_receipts()) == 1
    status = githook.git_hook_status(project)
    assert status["installed"] and status["chained"] and status["path"] == str(py)



def test_only_recalld_holding_the_commit_stops_it(user, project, tmp_path):  # noqa: F811
    """The script stops a commit when recalld's output starts with the hold line (a gate
    crystal, tests/test_crystals.py runs it with the real recalld); any other output, or a
    failing recalld, lets the commit through."""
    from recalld.agents import git as git_agent

    fakes = {"holds": f"#!/bin/sh\nprintf '%s\\nREASON-TEXT\\n' {shlex.quote(git_agent.GATE_MARK)}\n",
             "talks": f"#!/bin/sh\necho 'a note, then' ; echo {shlex.quote(git_agent.GATE_MARK)}; exit 2\n"}
    for name, body in fakes.items():
        fake = tmp_path / name / "recalld"
        fake.parent.mkdir()
        fake.write_text(body)
        fake.chmod(0o755)
        githook.install_git_hook(project, [str(fake)])
        f = project / f"{name}.txt"
        f.write_text("x\n")
        git(project, "add", f.name)
        out = git(project, "commit", "-m", name, check=False)
        if name == "holds":
            assert out.returncode != 0 and "REASON-TEXT" in out.stdout + out.stderr
        else:
            assert out.returncode == 0 and "a note, then" in out.stdout + out.stderr
