"""Scope: one resolver for reads and writes; worktrees, subdirectories and symlinks are one
project; other projects and other agents' private notes never leak."""

import os
import subprocess

from recalld.core import scope
from recalld import memories
from recalld.core.search import search


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


def test_worktree_subdir_and_symlink_are_one_project(project, tmp_path):
    (project / "src" / "deep").mkdir(parents=True)
    (project / "README").write_text("x")
    git("add", "README", cwd=project)
    git("commit", "-qm", "init", cwd=project)
    wt = tmp_path / "wt"
    git("worktree", "add", "-q", str(wt), cwd=project)
    link = tmp_path / "link"
    link.symlink_to(project / "src")
    ids = {scope.resolve_project(str(p)) for p in (project, project / "src" / "deep", wt, link, str(link) + "/deep")}
    assert ids == {str(project.resolve())}


def test_outside_git_is_the_real_cwd(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    link = tmp_path / "plainlink"
    link.symlink_to(d)
    assert scope.resolve_project(str(link)) == str(d.resolve())


def test_submodule_style_gitdir_without_commondir_is_its_own_project(tmp_path):
    outer = tmp_path / "outer"
    (outer / ".git" / "modules" / "sub").mkdir(parents=True)
    sub = outer / "sub"
    sub.mkdir()
    (sub / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert scope.resolve_project(str(sub)) == str((outer / ".git" / "modules" / "sub").resolve())
    assert scope.resolve_project(str(outer)) == str(outer.resolve())


def test_agent_identity(monkeypatch):
    monkeypatch.delenv("RECALLD_AGENT", raising=False)
    monkeypatch.delenv("RECALLD_SUBAGENT", raising=False)
    assert scope.resolve_agent({}) == "main"
    # agent_type only counts inside a subagent (agent_id present), and only under the main agent
    assert scope.resolve_agent({"agent_type": "reviewer"}) == "main"
    assert scope.resolve_agent({"agent_id": "a1", "agent_type": "reviewer"}) == "main/reviewer"
    monkeypatch.setenv("RECALLD_AGENT", "builder")
    assert scope.resolve_agent({}) == "builder"
    assert scope.resolve_agent({"agent_id": "a1", "agent_type": "reviewer"}) == "builder/reviewer"
    # outside a hook (CLI, MCP) the environment names the subagent
    monkeypatch.setenv("RECALLD_SUBAGENT", "reviewer")
    assert scope.resolve_agent() == "builder/reviewer"


def test_reads_see_own_agent_project_and_shared_only(conn, project, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    me = scope.Scope(scope.resolve_project(str(project)), "main")
    reviewer = scope.Scope(me.project, "reviewer")
    stranger = scope.Scope(scope.resolve_project(str(other)), "main")
    memories.remember(conn, "zebra deploys use the blue pipeline", me, scope="project", check_similar=False)
    memories.remember(conn, "zebra private note of main", me, scope="agent", check_similar=False)
    memories.remember(conn, "zebra private note of reviewer", reviewer, scope="agent", check_similar=False)
    memories.remember(conn, "zebra shared convention across repos", stranger, scope="shared", check_similar=False)
    memories.remember(conn, "zebra secret of the other project", stranger, scope="project", check_similar=False)

    def texts(sc):
        return sorted(h.text for h in search(conn, "zebra", sc, limit=50))

    assert texts(me) == ["zebra deploys use the blue pipeline", "zebra private note of main",
                         "zebra shared convention across repos"]
    assert texts(reviewer) == ["zebra deploys use the blue pipeline", "zebra private note of reviewer",
                               "zebra shared convention across repos"]
    assert texts(stranger) == ["zebra secret of the other project", "zebra shared convention across repos"]


def test_write_and_read_resolve_the_same_project_from_a_worktree(conn, project, tmp_path):
    (project / "f").write_text("x")
    git("add", "f", cwd=project)
    git("commit", "-qm", "init", cwd=project)
    wt = tmp_path / "wt2"
    git("worktree", "add", "-q", str(wt), cwd=project)
    memories.remember(conn, "quokka migrations run in the worktree", scope.resolve(str(wt)), check_similar=False)
    hits = search(conn, "quokka migrations", scope.resolve(str(project / ".")), limit=5)
    assert [h.text for h in hits] == ["quokka migrations run in the worktree"]


def test_the_daemon_judges_a_session_in_the_scope_its_hooks_resolved(conn):
    """The transcript does not say who the agent is (RECALLD_AGENT, a subagent's type); the
    session's hook receipts do, and the daemon's pass takes its scope from them."""
    from types import SimpleNamespace

    from recalld.core import receipts
    from recalld.daemon import passes

    def hook_receipt(session, agent, project="/p"):
        r = receipts.new("hook", "prompt-submit")
        r.update(session=session, agent=agent, project=project, outcome="nothing")
        receipts.insert(conn, r)

    hook_receipt("s1", "reviewer")
    hook_receipt("s1", "reviewer/Explore")
    hook_receipt("s1", "someone-else", project="/other")
    main = passes.session_scope(conn, SimpleNamespace(session="s1", agent="main"), "/p")
    sub = passes.session_scope(conn, SimpleNamespace(session="s1", agent="agent-a1b2"), "/p")
    assert (main.project, main.agent) == ("/p", "reviewer")
    assert sub.agent == "reviewer/Explore"
    # Before any hook ran in the session: main, and a subagent that can only see less.
    assert passes.session_scope(conn, SimpleNamespace(session="s2", agent="main"), "/p").agent == "main"
    assert passes.session_scope(conn, SimpleNamespace(session="s2", agent="agent-x"), "/p").agent == "main/subagent"
