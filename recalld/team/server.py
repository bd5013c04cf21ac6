"""The team's PostgreSQL: its schema, and the three things a replicator does there.

One append-only table of events for every team on the server; who reads and writes which rows
is PostgreSQL's own row-level security, per team and per project, for the login role (a role
per person; a superuser or the table's owner would bypass it, so members are neither). A
project's rows are read by the team's members who share that project themselves (`recalld
team join --project`). Pushes of one team take a transaction-level advisory lock, so the
sequence numbers of a team's events commit in order and a reader's cursor never skips an
event that committed late. Every insert notifies `recalld_events`, which wakes the other
replicators; their poll is the fallback.
"""

import json

CHANNEL = "recalld_events"
MEMBER_ROLE = "recalld_member"
PULL_BATCH = 1000

SCHEMA = f"""
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{MEMBER_ROLE}') THEN
        CREATE ROLE {MEMBER_ROLE} NOLOGIN;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS recalld_members (
    team text NOT NULL,
    role name NOT NULL,
    PRIMARY KEY (team, role)
);
CREATE TABLE IF NOT EXISTS recalld_projects (
    team text NOT NULL,
    project_key text NOT NULL,
    role name NOT NULL DEFAULT current_user,
    PRIMARY KEY (team, project_key, role)
);
CREATE TABLE IF NOT EXISTS recalld_events (
    seq bigserial PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    team text NOT NULL,
    project_key text,
    kind text NOT NULL CHECK (kind IN ('remember', 'supersede', 'retract')),
    memory_uid uuid NOT NULL,
    other_uid uuid,
    body jsonb NOT NULL DEFAULT '{{}}',
    origin_machine text NOT NULL,
    origin_user name NOT NULL DEFAULT current_user,
    origin_time text,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS recalld_events_team ON recalld_events (team, seq);

CREATE OR REPLACE FUNCTION recalld_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'recalld_events is append-only'; END $$;
DROP TRIGGER IF EXISTS recalld_events_append_only ON recalld_events;
CREATE TRIGGER recalld_events_append_only BEFORE UPDATE OR DELETE ON recalld_events
    FOR EACH ROW EXECUTE FUNCTION recalld_append_only();
DROP TRIGGER IF EXISTS recalld_events_no_truncate ON recalld_events;
CREATE TRIGGER recalld_events_no_truncate BEFORE TRUNCATE ON recalld_events
    FOR EACH STATEMENT EXECUTE FUNCTION recalld_append_only();
CREATE OR REPLACE FUNCTION recalld_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS recalld_events_notify ON recalld_events;
CREATE TRIGGER recalld_events_notify AFTER INSERT ON recalld_events
    FOR EACH STATEMENT EXECUTE FUNCTION recalld_notify();

ALTER TABLE recalld_members ENABLE ROW LEVEL SECURITY;
ALTER TABLE recalld_projects ENABLE ROW LEVEL SECURITY;
ALTER TABLE recalld_events ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS own ON recalld_members;
CREATE POLICY own ON recalld_members FOR SELECT USING (role = current_user);
DROP POLICY IF EXISTS own_read ON recalld_projects;
CREATE POLICY own_read ON recalld_projects FOR SELECT USING (role = current_user);
DROP POLICY IF EXISTS own_share ON recalld_projects;
CREATE POLICY own_share ON recalld_projects FOR INSERT WITH CHECK (
    role = current_user
    AND EXISTS (SELECT 1 FROM recalld_members m WHERE m.team = recalld_projects.team AND m.role = current_user));
DROP POLICY IF EXISTS member_read ON recalld_events;
CREATE POLICY member_read ON recalld_events FOR SELECT USING (
    EXISTS (SELECT 1 FROM recalld_members m WHERE m.team = recalld_events.team AND m.role = current_user)
    AND (project_key IS NULL OR EXISTS (SELECT 1 FROM recalld_projects p WHERE p.team = recalld_events.team
                                        AND p.project_key = recalld_events.project_key AND p.role = current_user)));
DROP POLICY IF EXISTS member_write ON recalld_events;
CREATE POLICY member_write ON recalld_events FOR INSERT WITH CHECK (
    origin_user = current_user
    AND EXISTS (SELECT 1 FROM recalld_members m WHERE m.team = recalld_events.team AND m.role = current_user)
    AND (project_key IS NULL OR EXISTS (SELECT 1 FROM recalld_projects p WHERE p.team = recalld_events.team
                                        AND p.project_key = recalld_events.project_key AND p.role = current_user)));

REVOKE ALL ON recalld_members, recalld_projects, recalld_events FROM PUBLIC;
GRANT SELECT ON recalld_members TO {MEMBER_ROLE};
GRANT SELECT, INSERT ON recalld_projects TO {MEMBER_ROLE};
GRANT SELECT, INSERT ON recalld_events TO {MEMBER_ROLE};
GRANT USAGE ON SEQUENCE recalld_events_seq_seq TO {MEMBER_ROLE};
"""


def connect(conninfo: str, *, autocommit: bool = False, timeout: float = 5.0):
    """A connection exactly as libpq configures it (TLS, service file, PGPASSFILE), with a
    bounded connect time and keepalives, so a server that vanished is noticed."""
    import psycopg

    return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=max(1, int(timeout)),
                           keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
                           application_name="recalld-team")


def install_schema(pg) -> None:
    """Create or update the schema (idempotent); run as the database's owner."""
    with pg.transaction():
        pg.execute(SCHEMA)


def add_member(pg, team: str, role: str) -> None:
    """As the owner: `role` (which must exist and log in) joins `team`."""
    from psycopg import sql

    with pg.transaction():
        pg.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(MEMBER_ROLE), sql.Identifier(role)))
        pg.execute("INSERT INTO recalld_members (team, role) VALUES (%s, %s) ON CONFLICT DO NOTHING", (team, role))


def teams_of_me(pg) -> list:
    return [r[0] for r in pg.execute("SELECT team FROM recalld_members WHERE role = current_user ORDER BY team")]


def share_project(pg, team: str, key: str) -> None:
    with pg.transaction():
        pg.execute("INSERT INTO recalld_projects (team, project_key) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                   (team, key))


def whoami(pg) -> dict:
    row = pg.execute("SELECT current_user, current_database(), inet_server_addr()::text, "
                     "current_setting('server_version'), pg_is_in_recovery()").fetchone()
    ssl = bool(getattr(pg.pgconn, "ssl_in_use", False))
    return {"user": row[0], "database": row[1], "server": f"{row[2] or 'local socket'} port {pg.info.port}",
            "version": row[3], "tls": ssl, "replica": row[4]}


def last_seq(pg, team: str, keys: list) -> int:
    """The primary's last sequence number of the events a pull reads (`pull`'s filter): what a
    pull from a replica must reach before it has seen a notified push."""
    row = pg.execute("SELECT coalesce(max(seq), 0) FROM recalld_events WHERE team = %s "
                     "AND (project_key IS NULL OR project_key = ANY(%s))", (team, keys)).fetchone()
    pg.commit()
    return row[0]


def push(pg, team: str, machine: str, rows: list) -> list:
    """Insert outbox rows as events in one transaction; an event the server already has is
    skipped (its id is unique), so a push repeated after a kill adds nothing. Returns
    [(outbox id, seq or None)]."""
    out = []
    with pg.transaction():
        pg.execute("SELECT pg_advisory_xact_lock(hashtext('recalld:' || %s))", (team,))
        with pg.cursor() as cur:
            for r in rows:
                cur.execute(
                    "INSERT INTO recalld_events (event_id, team, project_key, kind, memory_uid, other_uid, body, "
                    "origin_machine, origin_time) VALUES (%s::uuid,%s,%s,%s,%s::uuid,%s::uuid,%s::jsonb,%s,%s) "
                    "ON CONFLICT (event_id) DO NOTHING RETURNING seq",
                    (r["event_id"], team, r["project_key"], r["kind"], r["memory_uid"], r["other_uid"], r["body"],
                     machine, r["time"]))
                got = cur.fetchone()
                out.append((r["id"], got[0] if got else None))
    return out


def pull(pg, team: str, after: int, keys: list, limit: int = PULL_BATCH) -> tuple[list, int]:
    """The team's events after `after` that this role may read: shared ones and those of the
    project keys given. Returns (events, the last seq read)."""
    rows = pg.execute(
        "SELECT seq, event_id::text, project_key, kind, memory_uid::text, other_uid::text, body, origin_machine, "
        "origin_user::text, origin_time FROM recalld_events WHERE team = %s AND seq > %s "
        "AND (project_key IS NULL OR project_key = ANY(%s)) ORDER BY seq LIMIT %s",
        (team, after, keys, limit)).fetchall()
    pg.commit()
    names = ("seq", "event_id", "project_key", "kind", "memory_uid", "other_uid", "body", "origin_machine",
             "origin_user", "origin_time")
    events = []
    for r in rows:
        ev = dict(zip(names, r))
        if isinstance(ev["body"], str):
            ev["body"] = json.loads(ev["body"])
        events.append(ev)
    return events, (events[-1]["seq"] if events else after)
