"""`recalld install|uninstall AGENT` and `recalld doctor`: a thin layer over recalld.install
(the agents are recalld.agents' installable adapters)."""

import importlib.util
import json

import click


def _fail(msg):
    from recalld.cli.common import Fail

    return Fail(msg)


def _scope_options(f):
    f = click.option("--user", "scope", flag_value="user", default=True,
                     help="The user's own settings (default).")(f)
    f = click.option("--project", "scope", flag_value="project",
                     help="The project's settings (the git repository of --cwd).")(f)
    f = click.option("--cwd", type=click.Path(file_okay=False, exists=True),
                     help="Find the project from here (default: current directory).")(f)
    return f


def autostart_available() -> bool:
    """The daemon's autostart lives in recalld/autostart.py when this build has it."""
    try:
        return importlib.util.find_spec("recalld.hook.autostart") is not None
    except (ImportError, ValueError):
        return False


def _set_autostart() -> "bool | None":
    from recalld.core import settings

    if not autostart_available() or "autostart" not in (settings.DEFAULTS.get("daemon") or {}):
        return None
    over = settings.load_overrides()
    if (over.get("daemon") or {}).get("autostart") is True:
        return True
    over.setdefault("daemon", {})["autostart"] = True
    settings.save(over)
    return True


def _print_plan(plan, records, dry_run: bool, show_diff: bool) -> None:
    for c in plan.changes:
        if not c.changed:
            click.echo(f"unchanged {c.path}")
            continue
        verb = "would change" if dry_run else ("removed" if c.after is None and c.restore_from is None
                                                else "updated" if c.before is not None else "created")
        what = f" ({', '.join(c.what)})" if c.what else ""
        click.echo(f"{verb} {c.path}{what}")
        if show_diff:
            click.echo(c.diff(), nl=False)
    for r in records:
        if r.get("backup"):
            click.echo(f"  backup of {r['file']}: {r['backup']}")
        if r.get("chained"):
            click.echo(f"  your existing hook now runs first, from {r['chained']}")
    for n in plan.notes:
        click.echo(f"note: {n}")


def _plan_json(plan, records, dry_run) -> dict:
    return {"action": plan.action, "agent": plan.agent, "scope": plan.scope, "dry_run": dry_run,
            "changed": plan.changed, "notes": plan.notes,
            "files": [{"path": str(c.path), "changed": c.changed, "what": c.what,
                       "deleted": c.changed and c.after is None and c.restore_from is None} for c in plan.changes],
            "records": records}


def _agent_install_command(agent: str):
    @click.command(name=agent)
    @_scope_options
    @click.option("--command", "command", help="How agents should run recalld (default: the absolute "
                  "path of this recalld, or `python -m recalld`).")
    @click.option("--no-mcp", is_flag=True, help="Hooks only; leave the MCP server out.")
    @click.option("--daemon/--no-daemon", default=True, show_default=True,
                  help="Turn on daemon autostart (settings daemon.autostart) where this build has it.")
    @click.option("--force", is_flag=True, help="Replace an MCP server named `recalld` that is not recalld's.")
    @click.option("--history/--no-history", default=None,
                  help="Then draft proposals from the project's past Claude Code and Codex sessions (`recalld "
                  "propose --history`), or not. Default: ask in a terminal (default no), never otherwise.")
    @click.option("--dry-run", is_flag=True, help="Show the changes as a diff; write nothing.")
    @click.option("--no-model-probe", is_flag=True, help="Do not load each model in a child process to see it runs.")
    @click.option("--json", "as_json", is_flag=True)
    def cmd(scope, cwd, command, no_mcp, daemon, force, history, dry_run, no_model_probe, as_json):
        from recalld.install import plan as install
        from recalld.install.entries import InstallError
        from recalld.cli.common import echo_json

        try:
            plan = install.plan_install(agent, scope, cwd, command, mcp=not no_mcp, force=force)
            records = [] if dry_run else install.apply(plan)
        except (InstallError, OSError, ValueError) as e:
            raise _fail(str(e))
        autostart = None
        if daemon and not dry_run:
            autostart = _set_autostart()
        bytecode = None if dry_run else install.ensure_bytecode()
        probe = None
        if not dry_run and not no_model_probe:  # the same probe as `recalld doctor`
            from recalld.install import doctor

            probe = doctor.model_probe()
        if as_json:
            # JSON is for scripts: never a question; --history mines and reports here.
            past = _offer_history(cwd, history, ask=False, quiet=True) if history and not dry_run else None
            echo_json(dict(_plan_json(plan, records, dry_run), daemon_autostart=autostart, bytecode=bytecode,
                           history=past, model_probe=probe))
            return
        _print_plan(plan, records, dry_run, show_diff=dry_run)
        _print_probe(probe)
        if autostart:
            click.echo("daemon autostart: on (settings daemon.autostart; `recalld config set daemon.autostart false` turns it off)")
        if not dry_run:
            click.echo(f"recalld is {'wired into' if plan.changed else 'already in'} {agent} ({scope}). "
                       "`recalld doctor` checks it.")
            _offer_history(cwd, history, ask=history is None and _interactive())

    cmd.help = (f"Add recalld's hooks and MCP server to {agent}'s settings (idempotent; "
                "keeps everything else; backs up each file it changes).")
    return cmd


def _interactive() -> bool:
    """A person at a terminal: only then may install ask (a script or CI must never block)."""
    import sys

    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _offer_history(cwd, history: "bool | None", ask: bool, quiet: bool = False) -> "dict | None":
    """After the hooks are in: draft proposals from the project's past sessions, when --history
    says so or a person says yes (default no). The hooks are installed whatever happens here."""
    from recalld.capture import history as past
    from recalld.cli.proposals import mine_history, print_history
    from recalld.core import settings
    from recalld.core.scope import resolve_project

    project = resolve_project(cwd)
    later = f"recalld propose --history --project {project}"
    if history is False or (history is None and not ask):
        if history is None and not quiet:
            click.echo(f"past sessions: `{later}` drafts proposals from them (you review each).")
        return None
    try:
        cfg = settings.load()
        sessions = past.find_sessions(project, None, cfg)
    except (OSError, ValueError) as e:
        if not quiet:
            click.echo(f"past sessions: not searched ({e}); `{later}` tries again")
        return {"project": project, "error": str(e)}
    by_agent: dict = {}
    for s in sessions:
        by_agent[s.agent] = by_agent.get(s.agent, 0) + 1
    found = ", ".join(f"{_AGENT_WORDS.get(a, a or 'other')} {n}" for a, n in sorted(by_agent.items()))
    if not quiet:
        click.echo(f"past sessions of {project}: {len(sessions)}" + (f" ({found})" if found else ""))
    if not sessions:
        return {"project": project, "sessions": 0}
    if history is None:
        try:
            yes = click.confirm("Draft proposals from them now? Nothing is saved until you approve it", default=False)
        except click.Abort:  # Ctrl-C or end of input: a no, the install stands
            yes = False
            click.echo("")
        if not yes:
            click.echo(f"not now; `{later}` does it later")
            return None
    try:
        summary = mine_history(sessions, project, cfg)
    except Exception as e:  # the install is done; a failed mining run must not undo or fail it
        if not quiet:
            click.echo(f"mining the past sessions failed ({type(e).__name__}: {e}); `{later}` resumes it")
        return {"project": project, "error": f"{type(e).__name__}: {e}"}
    if not quiet:
        print_history(summary)
    return summary


_AGENT_WORDS = {"claude": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}


def _agent_uninstall_command(agent: str):
    @click.command(name=agent)
    @_scope_options
    @click.option("--dry-run", is_flag=True, help="Show the changes as a diff; write nothing.")
    @click.option("--json", "as_json", is_flag=True)
    def cmd(scope, cwd, dry_run, as_json):
        from recalld.install import plan as install
        from recalld.install.entries import InstallError
        from recalld.cli.common import echo_json

        try:
            plan = install.plan_uninstall(agent, scope, cwd)
            records = [] if dry_run else install.apply(plan)
        except (InstallError, OSError) as e:
            raise _fail(str(e))
        if as_json:
            echo_json(_plan_json(plan, records, dry_run))
            return
        _print_plan(plan, records, dry_run, show_diff=dry_run)
        if not plan.changed and not dry_run:
            click.echo(f"recalld was not in {agent} ({scope}); nothing to remove")

    cmd.help = f"Remove exactly the hooks and MCP server `recalld install {agent}` added."
    return cmd


def register(cli):
    from recalld.agents import INSTALL_NAMES

    @cli.group()
    def install():
        """Wire recalld into an agent (claude-code, codex, gemini) or a git repository."""

    @cli.group()
    def uninstall():
        """Take recalld out of an agent or a git repository again (exactly what install added)."""

    for agent in INSTALL_NAMES:
        install.add_command(_agent_install_command(agent))
        uninstall.add_command(_agent_uninstall_command(agent))

    @install.command("git-hook")
    @click.option("--cwd", type=click.Path(file_okay=False, exists=True))
    @click.option("--command", "command", help="How the hook should run recalld.")
    @click.option("--dry-run", is_flag=True)
    @click.option("--json", "as_json", is_flag=True)
    def install_git_hook(cwd, command, dry_run, as_json):
        """Add a pre-commit hook that offers `commit` notes; it stops a commit only to hold it once for a gate crystal.
        An existing pre-commit hook keeps running first, with its own exit status."""
        from recalld.install import githook, plan as install_plan
        from recalld.install.entries import InstallError
        from recalld.cli.common import echo_json

        try:
            plan = githook.plan_git_hook_install(cwd, command)
            records = [] if dry_run else install_plan.apply(plan)
            if not dry_run:
                install_plan.ensure_bytecode()
        except (InstallError, OSError) as e:
            raise _fail(str(e))
        if as_json:
            echo_json(_plan_json(plan, records, dry_run))
            return
        _print_plan(plan, records, dry_run, show_diff=dry_run)

    @uninstall.command("git-hook")
    @click.option("--cwd", type=click.Path(file_okay=False, exists=True))
    @click.option("--dry-run", is_flag=True)
    @click.option("--json", "as_json", is_flag=True)
    def uninstall_git_hook(cwd, dry_run, as_json):
        """Remove recalld's pre-commit hook (and put back the one it chained, if any)."""
        from recalld.install import githook, plan as install_plan
        from recalld.install.entries import InstallError
        from recalld.cli.common import echo_json

        try:
            plan = githook.plan_git_hook_uninstall(cwd)
            records = [] if dry_run else install_plan.apply(plan)
        except (InstallError, OSError) as e:
            raise _fail(str(e))
        if as_json:
            echo_json(_plan_json(plan, records, dry_run))
            return
        _print_plan(plan, records, dry_run, show_diff=dry_run)
        if not plan.changed and not dry_run:
            click.echo("no recalld pre-commit hook here; nothing to remove")

    @cli.command()
    @click.option("--cwd", type=click.Path(file_okay=False, exists=True))
    @click.option("--command", "command", help="Time this command's hook instead of this recalld's.")
    @click.option("--no-hook-run", is_flag=True, help="Skip the timed hook run.")
    @click.option("--no-model-probe", is_flag=True, help="Skip loading each model in a child process.")
    @click.option("--json", "as_json", is_flag=True)
    def doctor(cwd, command, no_hook_run, no_model_probe, as_json):
        """What is installed where, where state lives, each model probed in a child process, and
        one timed `prompt-submit` hook run."""
        from recalld.install.doctor import report
        from recalld.cli.common import echo_json

        rep = report(cwd, command, run_hook=not no_hook_run, probe_models=not no_model_probe)
        if as_json:
            echo_json(rep)
            return
        _print_doctor(rep)


def _print_probe(p: "dict | None") -> None:
    """`model judge: works (...)` or `crashes with SIGILL: ... rebuild: ...`, a line a role."""
    if not p:
        return
    if p.get("error"):
        click.echo(f"model probe: {p['error']}")
    for role, r in (p.get("status") or {}).items():
        click.echo(f"model probe {role}: {r.get('said')}")


def _print_daemon_health(d: dict) -> None:
    from recalld.cli.daemon import _model_lines

    died = d.get("died")
    if died:
        click.echo(f"  the daemon's last run DIED: pid {died.get('pid')}, {died.get('how')}"
                   + (f"; last log line: {died['last_log_line']}" if died.get("last_log_line") else ""))
    workers = {r: m for r, m in (d.get("model_workers") or {}).items()
               if m.get("state") in ("off", "does not load", "restarting")}
    for line in _model_lines(workers):
        click.echo(f"  {line}")


def _print_doctor(rep: dict) -> None:
    import shlex

    click.echo(f"recalld {rep['version']} ({rep['python']})")
    click.echo(f"command: {shlex.join(rep['command'])}")
    if rep.get("command_warning"):
        click.echo(f"  warning: {rep['command_warning']}")
    click.echo("\nagents:")
    for a in rep["agents"]:
        if a["error"]:
            state = f"unreadable: {a['error']}"
        elif not a["installed"]:
            state = "not installed"
        else:
            state = ("installed" if a["complete"] else "partly installed") + \
                f" (hooks: {', '.join(a['hooks']) or 'none'}; mcp: {'yes' if a['mcp'] else 'no'})"
        click.echo(f"  {a['agent']:12} {a['scope']:8} {state}")
        if a["installed"] or a["error"]:
            click.echo(f"  {'':12} {'':8} {a['hooks_file']}" +
                       (f", {a['mcp_file']}" if a["mcp_file"] != a["hooks_file"] else ""))
        for exe in a.get("missing_executables") or []:
            click.echo(f"  {'':12} {'':8} warning: {exe} is not there any more; run install again")
        for problem in a.get("problems") or []:  # the client will not run them (recalld.install.plan.activity)
            click.echo(f"  {'':12} {'':8} {problem}")
    g = rep["git_hook"]
    if not g.get("repository"):
        click.echo(f"  {'git-hook':12} {'':8} (not in a git repository)")
    else:
        gs = ("installed" + (", chained after your hook" if g["chained"] else "")) if g["installed"] else "not installed"
        click.echo(f"  {'git-hook':12} {'repo':8} {gs} ({g['path']})")
    s = rep["state"]
    click.echo(f"\nstate: {s['home']}")
    if s["db_exists"]:
        click.echo(f"  database {s['db_path']}: {s['db_bytes']} bytes (+{s['wal_bytes']} WAL), schema "
                   f"{s['schema_version']} (code expects {s['expected_schema_version']}), "
                   f"{s['current_memories']} current memories of {s['memories']}, {s['receipts']} receipts")
    else:
        click.echo(f"  database {s['db_path']}: not created yet")
    click.echo(f"  fallback receipts: {s['fallback_receipts']} ({s['fallback_receipts_path']})")
    if s.get("error"):
        click.echo(f"  error: {s['error']}")
    for name in ("models", "daemon", "team"):
        m = rep[name]
        if not m.get("available"):
            click.echo(f"{name}: not part of this build")
        elif m.get("error"):
            click.echo(f"{name}: {m['error']}")
        elif name == "models" and isinstance(m.get("status"), dict) and all(
                isinstance(v, dict) and "role" in v for v in m["status"].values()):
            for role, c in m["status"].items():
                click.echo(f"model {role}: " + (f"{c['path']} ({c['source']}, {c['size']} bytes)"
                                                if c.get("available") else f"none ({c.get('reason')})")
                           + ("; not used: proposals.model_weight is 0, capture ranks by its cues"
                              if c.get("used") is False else ""))
        elif name == "daemon" and isinstance(m.get("status"), dict) and "running" in m["status"]:
            d = m["status"]
            serving = d["running"] and ((d.get("last_status") or {}).get("hooks") or {}).get("listening")
            click.echo(f"daemon: {'running, pid ' + str(d['pid']) if d['running'] else 'not running'}"
                       f"{', serving the hooks' if serving else ''}; autostart {'on' if d['autostart'] else 'off'}")
            _print_daemon_health(d)
        elif name == "team" and isinstance(m.get("status"), dict):
            click.echo("team: " + _team_line(m["status"]))
        else:
            click.echo(f"{name}: {json.dumps(m.get('status'), default=str)[:500]}")
    _print_probe(rep.get("model_probe"))
    b = rep.get("bytecode")
    if b:
        if b["missing_or_stale"]:
            click.echo(f"\nbytecode: {len(b['missing_or_stale'])} of {b['hot_modules']} hook modules have no current "
                       f".pyc, so every hook run recompiles them; `recalld install ...` or "
                       f"`python3 -m compileall {b['package']}` fixes it")
        else:
            click.echo(f"\nbytecode: compiled ({b['hot_modules']} hook modules)")
    c = rep.get("crystals")
    if c:
        from recalld.cli.crystals import trust_line

        click.echo("\ncrystals: " + (c["error"] if c.get("error") else f"{c['dir']}: trusted, {c['crystals']} crystal(s)"
                                     if c["state"] == "trusted" else trust_line(c)))
    h = rep.get("hook_run")
    if h:
        click.echo(f"\nhook run: {shlex.join(h['command'])}")
        if h["wall_ms"] is not None:
            click.echo(f"  wall {h['wall_ms']} ms (a bare `python3 -c pass` here: {h['bare_python_ms']} ms), "
                       f"exit {h['exit_code']}, output {'valid' if h['stdout_valid'] else 'INVALID'}")
        r = h.get("receipt")
        if r:
            where = "inside the daemon" if r.get("served") == "daemon" else "inside the hook"
            click.echo(f"  receipt: {r['outcome']} in {r['duration_ms']} ms {where}, "
                       f"{r['delivered']} delivered ({r['stored']})" + (f", error {r['error']}" if r['error'] else "")
                       + (f"; the daemon did not run it: {r['served']}" if r.get("served") not in (None, "daemon",
                                                                                                    "in-process") else ""))
        if h.get("error"):
            click.echo(f"  problem: {h['error']}")


def _team_line(t: dict) -> str:
    if not t.get("joined"):
        return "not in a team (recalld team join URL)"
    rep = t.get("replicator") or {}
    sync = "no sync yet (is the daemon running?)" if not t.get("last_pull") else \
        f"last sync {t['last_pull']}{', connected' if rep.get('connected') else ', not connected'}"
    err = t.get("last_error")
    return (f"{t['team']}, {len(t.get('projects') or {})} shared projects; {sync}; {t['queued']} queued"
            + (f"; last error {err.get('time')}: {err.get('error')}" if err else ""))
