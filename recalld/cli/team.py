"""`recalld team join|status|leave` and `recalld team admin init|add`: team memory through the
team's PostgreSQL (recalld/team; docs/team.md)."""

import click

from recalld.cli.common import Fail, echo_json, open_db


def _need_psycopg():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Fail("team sync needs psycopg: pip install 'recalld[team]'") from None


def _server(conninfo: str):
    from recalld.team import config, server

    _need_psycopg()
    try:
        config.check_conninfo(conninfo)
        return server.connect(conninfo)
    except config.TeamError as e:
        raise Fail(str(e)) from None
    except Exception as e:
        raise Fail(f"cannot reach the team's server: {' '.join(str(e).split())[:300]}") from None


def register(cli):
    @cli.group()
    def team():
        """Share memories with a team through its PostgreSQL: the shared scope, and projects you share."""

    @team.command("join")
    @click.argument("conninfo", metavar="URL")
    @click.option("--team", "team_name", help="The team to join (default: your role's only team on the server).")
    @click.option("--project", "share", is_flag=True, help="Also share this repository's project memories "
                  "(the project is named by its normalized git remote URL).")
    @click.option("--cwd", type=click.Path(file_okay=False), help="The repository (default: current directory).")
    @click.option("--read", "read_conninfo", metavar="URL", help="A read replica of the team's server: pulls "
                  "read there; pushes and notifications stay on URL (taken at the first join).")
    @click.option("--json", "as_json", is_flag=True)
    def join_cmd(conninfo, team_name, share, cwd, read_conninfo, as_json):
        """Join a team (URL: a libpq URL, `key=value` string or `service=NAME`, without a password:
        libpq reads it from PGPASSFILE or the service file). Again with --project in each repository
        you share. The daemon syncs (recalld daemon start)."""
        from recalld.core import scope
        from recalld.team import config, remote, server

        pg = _server(conninfo)
        conn = open_db()
        try:
            who = server.whoami(pg)
            teams = server.teams_of_me(pg)
            pg.commit()
            m = config.current(conn)
            if team_name is None:
                if m is not None and m.conninfo == conninfo:
                    team_name = m.team
                elif len(teams) == 1:
                    team_name = teams[0]
                else:
                    raise Fail(f"role {who['user']} is in {len(teams)} teams on this server"
                               + (f" ({', '.join(teams)}); name one with --team" if teams else
                                  ": ask the team's admin to add it (recalld team admin add)"))
            if team_name not in teams:
                raise Fail(f"role {who['user']} is not a member of team {team_name!r} on this server")
            if m is not None and (m.team, m.conninfo) != (team_name, conninfo):
                raise Fail(f"this store syncs with team {m.team!r} ({m.conninfo}): recalld team leave first")
            out = {"team": team_name, "user": who["user"], "server": who, "joined": m is None, "shared": None}
            if m is None:
                if read_conninfo:
                    rd = _server(read_conninfo)
                    try:
                        out["reader"] = server.whoami(rd)
                        if team_name not in server.teams_of_me(rd):
                            raise Fail(f"the read replica does not show role {who['user']} in team {team_name!r}")
                    finally:
                        rd.close()
                config.record(conn, "join", team=team_name, conninfo=conninfo, machine=config.new_machine_id(),
                              read_conninfo=read_conninfo)
                m = config.current(conn)
            if share:
                project = scope.resolve_project(cwd)
                key = remote.project_key(project)
                if key is None:
                    raise Fail(f"{project} has no git remote: a project is shared under its remote URL, "
                               "so every clone finds it")
                server.share_project(pg, team_name, key)
                if m.projects.get(project) != key:
                    config.record(conn, "share", team=team_name, project=project, project_key=key)
                out["shared"] = {"project": project, "key": key}
        finally:
            pg.close()
            conn.close()
        if as_json:
            echo_json(out)
            return
        click.echo(f"{'joined' if out['joined'] else 'already in'} team {team_name} as {who['user']} "
                   f"({who['database']} on {who['server']}, TLS {'on' if who['tls'] else 'off'})")
        if out["shared"]:
            click.echo(f"sharing {out['shared']['project']} as {out['shared']['key']}")
        click.echo("the daemon syncs: recalld daemon start (recalld team status shows it)")

    @team.command("status")
    @click.option("--json", "as_json", is_flag=True)
    def status_cmd(as_json):
        """Team, last sync, lag, queued events, errors."""
        from recalld.team import status

        conn = open_db(reading=True)
        try:
            st = status.of(conn)
        finally:
            conn.close()
        if as_json:
            echo_json(st)
            return
        click.echo(format_status(st))

    @team.command("leave")
    def leave_cmd():
        """Stop syncing. Memories that came from the team stay (marked with their origin); queued
        events are not sent."""
        from recalld.team import config, outbox

        conn = open_db()
        try:
            m = config.current(conn)
            if m is None:
                click.echo("not in a team")
                return
            q = outbox.queued(conn, m.team)["queued"]
            config.record(conn, "leave", team=m.team)
        finally:
            conn.close()
        click.echo(f"left team {m.team}" + (f"; {q} queued events were not sent" if q else ""))

    @team.group("admin")
    def admin():
        """For the team's admin, as the database's owner."""

    @admin.command("init")
    @click.argument("conninfo", metavar="URL")
    def admin_init(conninfo):
        """Create or update recalld's tables, row-level security and notifications in the database."""
        from recalld.team import server

        pg = _server(conninfo)
        try:
            server.install_schema(pg)
        except Exception as e:
            raise Fail(f"could not install the schema: {' '.join(str(e).split())[:300]}") from None
        finally:
            pg.close()
        click.echo("schema ready")

    @admin.command("add")
    @click.argument("conninfo", metavar="URL")
    @click.argument("team_name", metavar="TEAM")
    @click.argument("role")
    def admin_add(conninfo, team_name, role):
        """Make ROLE (an existing login role, one per person) a member of TEAM."""
        from recalld.team import server

        pg = _server(conninfo)
        try:
            server.add_member(pg, team_name, role)
        except Exception as e:
            raise Fail(f"could not add {role}: {' '.join(str(e).split())[:300]}") from None
        finally:
            pg.close()
        click.echo(f"{role} is in team {team_name}")


def format_status(st: dict) -> str:
    if not st.get("joined"):
        left = st.get("left")
        return "not in a team" + (f" (left {left['team']} at {left['time']})" if left else "")
    lines = [f"team {st['team']} ({st['conninfo']}), this machine {st['machine']}, joined {st['joined_at']}"]
    if st.get("read_conninfo"):
        lines.append(f"  pulls read from {st['read_conninfo']}")
    for project, key in sorted((st.get("projects") or {}).items()):
        lines.append(f"  sharing {project} as {key}")
    rep = st.get("replicator")
    if not rep:
        lines.append("replicator: no status yet (is the daemon running? recalld daemon start)")
    else:
        state = "connected" if rep.get("connected") else "not connected"
        lines.append(f"replicator: {'running' if rep.get('running') else 'stopped'} (pid {rep.get('pid')}), {state}, "
                     f"status at {rep.get('written_at')}")
    age = st.get("last_sync_age_s")
    lines.append(f"last sync: {st.get('last_pull') or 'never'}" + (f" ({age:g} s ago)" if age is not None else ""))
    lines.append(f"queued: {st['queued']} events" + (f", oldest {st['oldest_queued']} (lag {st['lag_s']:g} s)"
                                                      if st["queued"] else ""))
    if st.get("unscanned_changes"):
        lines.append(f"local changes the replicator has not looked at yet: {st['unscanned_changes']}")
    came = st.get("from_team") or {}
    lines.append(f"shared by this machine: {st['shared_by_me']} memories; from the team: "
                 + (", ".join(f"{k} {v}" for k, v in sorted(came.items())) or "nothing yet"))
    err = st.get("last_error")
    if err:
        lines.append(f"last error: {err.get('time')}: {err.get('stage', '')} {err.get('error')}".replace("  ", " "))
    return "\n".join(lines)
