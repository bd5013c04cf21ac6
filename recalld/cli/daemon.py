"""`recalld daemon run|start|stop|status`."""

import os
import signal
import sys
import time

import click


def turn_end_hooks() -> tuple:
    """What runs at every live turn end; `daemon run` is the one place the daemon is assembled."""
    from recalld.capture import proposer

    return (proposer.on_turn_end,)


def register(cli):
    @cli.group()
    def daemon():
        """The background daemon: tails transcripts, judges needs, queues what passes."""

    @daemon.command("run")
    def run_cmd():
        """Run in the foreground until SIGTERM or Ctrl-C (logs: RECALLD_HOME/logs/daemon.log)."""
        from recalld.hook import autostart
        from recalld.daemon.log import log_path
        from recalld.daemon.embedder import EmbedPass
        from recalld.daemon.service import Daemon
        from recalld.daemon import lastrun

        pid = autostart.running_pid()
        if pid is not None:
            # exit status 3 (not 1): service managers are told not to restart on it
            click.echo(f"recalld: a daemon is already running (pid {pid})", err=True)
            sys.exit(3)
        died = lastrun.begin()
        if died:
            click.echo(f"recalld: the last daemon (pid {died.get('pid')}) {died.get('how')}", err=True)
        from recalld.team.replicator import start_for_daemon

        dm = Daemon(turn_end_hooks=turn_end_hooks(), embedder=EmbedPass())
        team = start_for_daemon(dm)  # the team replicator (recalld/team), idle until `recalld team join`
        click.echo(f"recalld daemon: pid {os.getpid()}, log {log_path()}", err=True)
        code = dm.run()
        dm.stop_event.set()  # also when it never started (another daemon holds the lock)
        team.join(timeout=10)
        if code == 3:
            click.echo(f"recalld: a daemon is already running (pid {autostart.running_pid()})", err=True)
        sys.exit(code)

    @daemon.command("start")
    @click.option("--wait", "wait_s", default=10.0, show_default=True, help="Seconds to wait for it to come up.")
    def start_cmd(wait_s):
        """Start the daemon in the background (a no-op when one is running)."""
        from recalld.hook import autostart
        from recalld.cli.common import Fail

        pid = autostart.running_pid()
        if pid is not None:
            click.echo(f"already running (pid {pid})")
            return
        child = autostart.spawn()
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            pid = autostart.running_pid()
            if pid is not None:
                # "started" once its status is written, so a `daemon status` right after has it
                while time.monotonic() < end and not _status_of(pid if pid > 0 else child):
                    time.sleep(0.05)
                click.echo(f"started (pid {pid if pid > 0 else child})")
                return
            if _exited(child):
                break
            time.sleep(0.1)
        raise Fail(f"the daemon did not come up (pid {child}); see {_log()}")

    @daemon.command("stop")
    @click.option("--wait", "wait_s", default=30.0, show_default=True, help="Seconds to wait for a clean exit.")
    def stop_cmd(wait_s):
        """Stop the background daemon (SIGTERM, then wait for a clean shutdown)."""
        from recalld.hook import autostart
        from recalld.cli.common import Fail

        pid = autostart.running_pid()
        if pid is None:
            click.echo("not running")
            return
        if pid <= 0:
            raise Fail("a daemon holds the lock but wrote no pid file; stop it by hand")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            click.echo("not running")
            return
        except PermissionError:
            raise Fail(f"not allowed to signal pid {pid}")
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            if autostart.running_pid() is None:
                click.echo(f"stopped (pid {pid})")
                return
            time.sleep(0.1)
        raise Fail(f"pid {pid} did not stop within {wait_s:g} s (it may be finishing a model call)")

    @daemon.command("status")
    @click.option("--json", "as_json", is_flag=True)
    def status_cmd(as_json):
        """Uptime, watched roots, sessions and offsets, queue depth, judge model, passes, last error."""
        from recalld.daemon.status import status
        from recalld.cli.common import echo_json

        st = status()
        if as_json:
            echo_json(st)
            return
        click.echo(_format(st))


def _exited(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:
        return True


def _status_of(pid: int) -> bool:
    """Has the daemon `pid` written its status file yet?"""
    import json
    from pathlib import Path

    from recalld.hook import autostart

    try:
        return json.loads(Path(autostart.status_path()).read_text(encoding="utf-8")).get("pid") == pid
    except (OSError, ValueError, AttributeError):
        return False


def _log() -> str:
    from recalld.daemon.log import log_path

    return str(log_path())


def _format(st: dict) -> str:
    lines = []
    if st["running"]:
        lines.append(f"running: pid {st.get('pid')}, up {_dur(st.get('uptime_s'))}, watching by {st.get('watch_mode')}")
    else:
        lines.append("not running")
        lr = st.get("last_run") or {}
        if lr:
            lines.append(f"  last run: started {lr.get('started_at')}, last status {lr.get('written_at')}")
    lines.append(f"autostart: {'on' if st.get('autostart') else 'off'}   log: {st.get('log')}")
    lines.append("roots:")
    for r in st.get("roots") or []:
        flags = [] if r.get("exists") else ["missing"]
        if r.get("watched"):
            flags.append("watched")
        lines.append(f"  {r['path']} ({r['agent']}){' [' + ', '.join(flags) + ']' if flags else ''}")
    d = st.get("died")
    if d:
        lines.append(f"  the last run DIED: pid {d.get('pid')}, {d.get('how')}"
                     + (f" (started {d['started_at']}, last status {d.get('last_status_at')})" if d.get("started_at") else ""))
        for w in d.get("where") or []:
            lines.append(f"    at {w}")
        if d.get("last_log_line"):
            lines.append(f"    last log line: {d['last_log_line']}")
    elif st["running"] and st.get("last_death"):
        d = st["last_death"]
        lines.append(f"  the run before this one died: pid {d.get('pid')}, {d.get('how')} (noticed {d.get('noticed_at')})")
    j = st.get("judge") or {}
    if j.get("available") is False:
        lines.append(f"judge: unavailable: {j.get('reason')}")
    else:
        lines.append(f"judge: {j.get('model')} ({j.get('source')}), {'loaded' if j.get('loaded') else 'not loaded'}")
    lines.extend(_model_lines(st.get("models") or {}))
    h = st.get("hooks") or {}
    if st["running"]:
        if h.get("listening"):
            lines.append(f"hooks: served ({h.get('served', 0)} runs; {h.get('dropped', 0)} left to run themselves, "
                         f"{h.get('refused', 0)} refused)")
        else:
            lines.append(f"hooks: each runs itself ({h.get('reason') or 'daemon.serve_hooks is 0'})")
    lines.append(f"transcripts: {st.get('files', 0)} files, {st.get('lines', 0)} lines, "
                 f"{st.get('events', 0)} events, {st.get('malformed', 0)} malformed; {st.get('sessions', 0)} sessions")
    for o in (st.get("offsets") or [])[:5]:
        lines.append(f"  {o['path']}: offset {o['offset']}, {o['lines']} lines ({o['reason']} {o['time']})")
    lines.append(f"queue depth: {st.get('queue_depth', 0)}")
    p = st.get("passes") or {}
    if p:
        lines.append("passes this run: " + (", ".join(f"{k} {v}" for k, v in p.items() if v) or "none"))
    lines.append(f"passes recorded: {st.get('passes_recorded', 0)}")
    store = st.get("store") or (st.get("last_run") or {}).get("store") or {}
    if store.get("error"):
        lines.append(f"store: {store['error']}")
    elif store.get("reopened"):
        lines.append(f"store: reopened {store['reopened']} time(s): the database file was deleted or replaced "
                     f"(last {(store.get('last_reopen') or {}).get('time')}); events before that are not in it")
    err = st.get("last_error") or st.get("last_pass_error")
    if err:
        lines.append(f"last error: {err.get('time')}: {err.get('message') or err.get('error')}")
    return "\n".join(lines)


def _model_lines(models: dict) -> list:
    """One line per role's model worker: running (pid, RSS), off and the fix, restarting."""
    out = []
    for role, m in models.items():
        state = m.get("state")
        if state == "running":
            line = f"model worker ({role}): running, pid {m.get('pid')}, RSS {m.get('rss_mb')} MB"
        elif state in ("off", "does not load"):
            line = f"model worker ({role}): {state.upper()}: {m.get('reason')}"
        elif state == "restarting":
            line = f"model worker ({role}): restarting in {m.get('restart_in_s')} s"
        else:
            line = f"model worker ({role}): {state}" + (f": {m['reason']}" if m.get("reason") else "")
        last = m.get("last_failure")
        if last and state != "off":
            line += f"; last failure {last.get('time')}: {last.get('message')}"
        out.append(line)
    return out


def _dur(s) -> str:
    if s is None:
        return "?"
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"
