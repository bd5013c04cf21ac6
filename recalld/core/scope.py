"""The one scope resolver. Reads and writes both call it, so they can never disagree about
which project a session belongs to (resolve it twice and the two eventually disagree, filing a fact into a drawer the next
session never opens).

Standard library only, no subprocess: it runs inside every hook.

Who may claim what (docs/security.md, "Scope"):
- The project comes from a directory. The CLI takes any directory (`--cwd`: the user is
  trusted with all their projects). A caller whose scope was fixed when it started (the MCP
  server) may only `narrow` to a directory of the same project, never cross to another.
- The agent identity comes from the environment the process was started in (RECALLD_AGENT,
  set by the user), else "main". A hook payload (JSON the agent harness writes for each run)
  may only say that the run is inside a subagent; the identity is then "<main>/<subagent
  type>", so a payload can never claim a bare name like "a" that RECALLD_AGENT=a uses, nor
  "main". The CLI and MCP reach the same subagent identity with RECALLD_SUBAGENT=<type>, so
  what a subagent writes with `--scope agent` its hooks read back.
"""

import os

SCOPES = ("agent", "project", "shared")
MAIN = "main"
# A payload that says it is a subagent without a usable type still gets a subagent identity:
# claiming a subagent can only narrow what a run reads, never widen it.
UNNAMED_SUBAGENT = "subagent"
MAX_SUBAGENT_TYPE = 64


class ScopeError(ValueError):
    """A caller asked for a scope it may not have (a cwd in another project)."""


class Scope:
    """Who is asking: the project and the agent identity. (Plain class: the hook imports it,
    and `dataclasses` would cost every hook run an `inspect` import.)"""

    __slots__ = ("project", "agent")

    def __init__(self, project: str, agent: str):
        self.project = project  # the repository's main root, or the real cwd outside git
        self.agent = agent  # RECALLD_AGENT or "main", or "<that>/<subagent type>"

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

    def sees(self, scope: str, project: str, agent: str) -> bool:
        """Whether this caller may read a memory of that scope, project and agent, current or
        not (history shows superseded ones): the rule of `where` without the validity."""
        if scope == "shared":
            return True
        return project == self.project and (scope == "project" or (scope == "agent" and agent == self.agent))


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


def main_agent(env: "dict | None" = None) -> str:
    """The identity the process was started as: RECALLD_AGENT, else "main"."""
    env = os.environ if env is None else env
    explicit = env.get("RECALLD_AGENT")
    explicit = explicit.strip() if isinstance(explicit, str) else ""
    return explicit or MAIN


def subagent_identity(main: str, agent_type) -> str:
    """"<main>/<type>": always under its main agent's name, so no subagent type can be
    another agent's bare name. The type keeps letters, digits and `-_.:` (a `/` would let a
    type pose as a deeper identity), at most MAX_SUBAGENT_TYPE characters."""
    t = agent_type.strip() if isinstance(agent_type, str) else ""
    t = "".join(c if c.isalnum() or c in "-_.:" else "-" for c in t)[:MAX_SUBAGENT_TYPE].strip("-")
    return f"{main}/{t or UNNAMED_SUBAGENT}"


def resolve_agent(payload: "dict | None" = None, env: "dict | None" = None) -> str:
    """The agent identity of a hook run (with its payload) or of a CLI/MCP process (without).

    A payload counts as a subagent's when it has `agent_id` (Claude Code sets `agent_id` and
    `agent_type` inside a subagent only); without one its `agent_type` is ignored. Outside a
    hook, RECALLD_SUBAGENT=<type> names the subagent, so its CLI writes and MCP calls use the
    identity its hooks read with."""
    env = os.environ if env is None else env
    main = main_agent(env)
    if isinstance(payload, dict) and payload.get("agent_id"):
        return subagent_identity(main, payload.get("agent_type"))
    sub = env.get("RECALLD_SUBAGENT")
    if isinstance(sub, str) and sub.strip():
        return subagent_identity(main, sub)
    return main


def resolve(cwd: "str | None" = None, payload: "dict | None" = None,
            env: "dict | None" = None) -> Scope:
    return Scope(project=resolve_project(cwd), agent=resolve_agent(payload, env))


def narrow(bound: Scope, cwd, base: "str | None" = None) -> Scope:
    """`bound` for a call that names `cwd`: the same scope when `cwd` lies in bound's project
    (a subdirectory, another worktree of the same repository), else ScopeError. For a caller
    whose scope was fixed when it started (the MCP server): a path argument may say where in
    the project the agent is, never move it to another project. A relative `cwd` is taken
    from `base` (where the caller started), else from the project."""
    if cwd is None or cwd == "":
        return bound
    if not isinstance(cwd, str) or "\x00" in cwd:
        raise ScopeError("cwd must be a directory path")
    path = os.path.join(base or bound.project, os.path.expanduser(cwd))
    if resolve_project(path) != bound.project:
        raise ScopeError(f"cwd {cwd} is not in this server's project ({bound.project}); "
                         "memories of another project are read from a server started there")
    return bound
