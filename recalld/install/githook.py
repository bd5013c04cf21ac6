"""`recalld install git-hook`: a pre-commit hook that offers the notes bound to `commit`. It
stops a commit only when recalld holds it on purpose (a `deliver: gate` crystal, once per commit
being made: the output starts with git.GATE_MARK); recalld missing, failing or slow never does.
An existing pre-commit hook is chained (moved aside and run first, its exit status deciding the
commit as before) and put back by `recalld uninstall git-hook`.
"""

import os
import shlex
import subprocess
from pathlib import Path

from recalld.agents import git
from recalld.install.entries import InstallError, importable_without_path, parse_command
from recalld.install.plan import FileChange, Plan, apply, read_text

GIT_MARKER = "# recalld-managed pre-commit hook"
GIT_CHAINED = f"{git.HOOK_NAME}.recalld-chained"


def git_hooks_dir(cwd=None) -> Path:
    """The directory git runs hooks from (honours core.hooksPath and worktrees)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    try:
        res = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        raise InstallError(f"cannot run git: {e}")
    if res.returncode != 0:
        raise InstallError(f"{cwd} is not inside a git repository")
    return (cwd / res.stdout.strip()).resolve()


def git_hook_script(prefix: list) -> str:
    cmd = shlex.join([*prefix, "hook", "commit", "--agent", git.ADAPTER.name])
    exe = shlex.quote(prefix[0])
    return f"""#!/bin/sh
{GIT_MARKER} (`recalld install git-hook`; `recalld uninstall git-hook` undoes it).
# 1. The repository's own pre-commit hook, if there was one, runs first, unchanged: its exit
#    status decides the commit exactly as before. A shell script is sourced with $0 still
#    naming this pre-commit file, because hook managers (husky, pre-commit) look at $0.
# 2. Then recalld offers the notes bound to `commit` for the staged files. It stops the commit
#    only when recalld holds it (output starting with the hold line; once per commit being
#    made: the same `git commit` again goes through). Whatever else happens (recalld missing,
#    broken, slow), this script exits 0.
chained="$(dirname "$0")/{GIT_CHAINED}"
if [ -x "$chained" ]; then
  # the interpreter named by its #! line, or "-" when that line passes options
  interp=$(sed -n '1s/^#![[:space:]]*//p' "$chained" | awk '{{ if ($1 ~ /\\/env$/) {{ i = $2; n = 2 }} else {{ i = $1; n = 1 }}; if (NF == n) print i; else print "-" }}')
  case "$interp" in
    ""|*/sh|sh|*/bash|bash|*/dash|dash|*/ksh|ksh)
      RECALLD_CHAINED="$chained" "${{interp:-sh}}" -c '. "$RECALLD_CHAINED"' "$0" "$@" || exit $? ;;
    *)
      "$chained" "$@" || exit $? ;;
  esac
fi
if command -v {exe} >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then
    out=$(timeout 10 {cmd} </dev/null 2>/dev/null)
  else
    out=$({cmd} </dev/null 2>/dev/null)
  fi
  case "$out" in
    {shlex.quote(git.GATE_MARK)}*) printf '%s\\n' "$out"; exit 1 ;;
  esac
  [ -z "$out" ] || printf '%s\\n' "$out"
fi
exit 0
"""


def plan_git_hook_install(cwd=None, command=None) -> Plan:
    prefix = parse_command(command)
    hooks_dir = git_hooks_dir(cwd)
    path = hooks_dir / git.HOOK_NAME
    plan = Plan("install", "git-hook", "repository")
    before = read_text(path)
    script = git_hook_script(prefix)
    if before is not None and GIT_MARKER in before:
        plan.changes.append(FileChange(path, before, script, ["pre-commit"] if before != script else [],
                                       mode=0o755))
    elif before is not None:
        chained = hooks_dir / GIT_CHAINED
        if chained.exists():
            raise InstallError(f"{chained} already exists; nothing was changed (move it away first)")
        plan.changes.append(FileChange(path, before, script, ["pre-commit (chained after your hook)"],
                                       mode=0o755, rename_to=chained))
        if not os.access(path, os.X_OK):
            plan.notes.append(f"your existing {path} is not executable, so git does not run it; "
                              "recalld keeps it that way")
    else:
        plan.changes.append(FileChange(path, None, script, ["pre-commit"], mode=0o755))
    warn = importable_without_path(prefix)
    if warn:
        plan.notes.append(warn)
    return plan


def plan_git_hook_uninstall(cwd=None) -> Plan:
    hooks_dir = git_hooks_dir(cwd)
    path = hooks_dir / git.HOOK_NAME
    chained = hooks_dir / GIT_CHAINED
    plan = Plan("uninstall", "git-hook", "repository")
    before = read_text(path)
    if before is None or GIT_MARKER not in before:
        if chained.exists():
            plan.notes.append(f"{path} is no longer recalld's, but {chained} (your earlier hook) is "
                              "still there; left both alone")
        return plan
    if chained.exists():
        plan.changes.append(FileChange(path, before, read_text(chained), ["pre-commit (your hook restored)"],
                                       restore_from=chained))
    else:
        plan.changes.append(FileChange(path, before, None, ["pre-commit"]))
    return plan


def install_git_hook(cwd=None, command=None) -> tuple:
    plan = plan_git_hook_install(cwd, command)
    return plan, apply(plan)


def uninstall_git_hook(cwd=None) -> tuple:
    plan = plan_git_hook_uninstall(cwd)
    return plan, apply(plan)


def git_hook_status(cwd=None) -> dict:
    try:
        hooks_dir = git_hooks_dir(cwd)
    except InstallError as e:
        return {"repository": False, "installed": False, "detail": str(e)}
    path = hooks_dir / git.HOOK_NAME
    text = read_text(path)
    return {"repository": True, "path": str(path), "installed": bool(text and GIT_MARKER in text),
            "chained": (hooks_dir / GIT_CHAINED).exists(),
            "executable": path.exists() and os.access(path, os.X_OK)}

