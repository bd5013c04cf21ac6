"""The one scope resolver. Reads and writes both call it, so they can never disagree about
which project a session belongs to (seed 002: "resolve it twice and the two eventually
disagree, filing a fact into a drawer the next session never opens").

Standard library only, no subprocess: it runs inside every hook.
"""

import os

SCOPES = ("agent", "project", "shared")


class Scope:
    """Who is asking: the project and the agent identity. (Plain class: the hook imports it,
    and `dataclasses` would cost every hook run an `inspect` import.)"""

    __slots__ = ("project", "agent")

    def __init__(self, project: str, agent: str):
        self.project = project  # the repository's main root, or the real cwd outside git
        self.agent = agent  # RECALLD_AGENT, else the subagent's type, else "main"

    def __eq__(self, other) -> bool:
        return isinstance(other, Scope) and (self.project, self.agent) == (other.project, other.agent)

    def __hash__(self) -> int:
        return hash((self.project, self.agent))

    def __repr__(self) -> str:
        return f"Scope(project={self.project!r}, agent={self.agent!r})"

    def where(self, alias: str = "") -> tuple[str, tuple]:
        """SQL filter for what this caller may read: its own agent notes, its project's
        memories and shared ones, current only."""
        p = f"{alias}." if alias else ""
        sql = (
            f"{p}invalid_at IS NULL AND ({p}scope = 'shared' OR ({p}project = ? AND "
            f"({p}scope = 'project' OR ({p}scope = 'agent' AND {p}agent = ?))))"
        )
        return sql, (self.project, self.agent)


def _read_first_line(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().strip()


def git_common_dir(start: str) -> "str | None":
    """The common .git directory of the repository containing `start`, or None.

    A linked worktree's `.git` is a file pointing at `<common>/worktrees/<name>`, whose
    `commondir` file points back at the common directory; following it makes every worktree
    of one repository the same project. A submodule's gitdir has no `commondir`, so a
    submodule stays a project of its own.
    """
    d = start
    while True:
        dotgit = os.path.join(d, ".git")
        if os.path.isdir(dotgit):
            return os.path.realpath(dotgit)
        if os.path.isfile(dotgit):
            try:
                line = _read_first_line(dotgit)
            except OSError:
                line = ""
            if line.startswith("gitdir:"):
                gitdir = line[len("gitdir:"):].strip()
                if not os.path.isabs(gitdir):
                    gitdir = os.path.join(d, gitdir)
                gitdir = os.path.realpath(gitdir)
                common = os.path.join(gitdir, "commondir")
                if os.path.isfile(common):
                    try:
                        rel = _read_first_line(common)
                    except OSError:
                        rel = ""
                    if rel:
                        return os.path.realpath(os.path.join(gitdir, rel))
                return gitdir
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def resolve_project(cwd: "str | None" = None) -> str:
    """Project id: the git repository of `cwd` (its main worktree root), else the real cwd."""
    if not cwd:
        cwd = os.getcwd()
    real = os.path.realpath(os.path.expanduser(cwd))
    common = git_common_dir(real)
    if common is None:
        return real
    if os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return common  # a bare repository (or a submodule's gitdir) names itself


def resolve_agent(payload: "dict | None" = None, env: "dict | None" = None) -> str:
    env = os.environ if env is None else env
    explicit = (env.get("RECALLD_AGENT") or "").strip()
    if explicit:
        return explicit
    if isinstance(payload, dict) and payload.get("agent_id"):
        agent_type = payload.get("agent_type")
        if isinstance(agent_type, str) and agent_type.strip():
            return agent_type.strip()
    return "main"


def resolve(cwd: "str | None" = None, payload: "dict | None" = None,
            env: "dict | None" = None) -> Scope:
    return Scope(project=resolve_project(cwd), agent=resolve_agent(payload, env))
