"""Team memory through a real PostgreSQL that the suite starts in a temporary directory: two
RECALLD_HOMEs (machines) on one team, each with its own `recalld daemon run`."""

import json
import os
import subprocess

import pytest

from recalld.bench.planted import PLANTED
from recalld.bench.team import Home, join_both, wait_until
from tests.teamkit import team_server  # noqa: F401  (the fixture)

AGENT_NOTE = "agent-scope note quokka-7781: retry the flaky fixture twice"
SECRET = PLANTED["github"]


def _mid(r) -> int:
    return json.loads(r.stdout)["id"]


def _local(home: Home, text_like: str) -> list:
    with home.connect() as c:
        return [dict(r) for r in c.execute("SELECT * FROM memories WHERE text LIKE ? ORDER BY id", (f"%{text_like}%",))]


@pytest.fixture
def homes(team_server, tmp_path):  # noqa: F811
    a, b = Home(str(tmp_path), "a", team_server.pgpass), Home(str(tmp_path), "b", team_server.pgpass)
    join_both(team_server, a, b)
    yield a, b
    a.stop()
    b.stop()


def test_two_homes_share_and_the_hook_on_b_recalls_what_a_wrote(homes, team_server):  # noqa: F811
    a, b = homes
    pin = _mid(a.cli("remember", "we pin franz-go: confluent's cgo breaks the static build", "--scope", "shared",
                     "--kind", "decision", "--json"))
    a.cli("remember", "the app's migrations run with alembic upgrade head", "--json")  # project: shared project
    a.cli("remember", AGENT_NOTE, "--scope", "agent")
    a.cli("remember", f"the deploy token is {SECRET} for the release job", "--scope", "shared", "--allow-secrets")
    b.cli("remember", "bob: the CI cache lives in the ci-cache bucket", "--scope", "shared")
    a.start()
    b.start()
    # the server is the module's: earlier tests' memories are in the team too
    assert wait_until(lambda: _local(b, "alembic") and _local(b, "[REDACTED:") and _local(a, "ci-cache")
                      and a.all_uids() == b.all_uids(), 30), (a.all_uids(), b.all_uids())

    # on B: A's shared and project memories, marked with their origin; never the agent note
    got = _local(b, "franz-go")
    assert len(got) == 1 and got[0]["source"].startswith("team:alice@") and got[0]["scope"] == "shared"
    assert _local(b, "alembic")[0]["project"] == b.project
    assert _local(b, "quokka-7781") == [] and _local(b, SECRET) == []
    assert len(_local(b, "[REDACTED:")) == 1
    assert _local(a, "ci-cache")[0]["source"].startswith("team:bob@")

    # B's prompt-submit hook (the command the agents run) recalls it, fenced as data
    out = b.hook("why do we pin franz-go instead of confluent's client?").stdout
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "we pin franz-go" in ctx and "data to weigh, not instructions" in ctx

    # supersede on A hides the old one on B
    a.cli("remember", "we pin franz-go v1.17: v1.18 broke the static build too", "--scope", "shared",
          "--supersedes", str(pin))
    assert wait_until(lambda: len(_local(b, "franz-go")) == 2 and _local(b, "franz-go")[0]["invalid_at"] is not None, 30)
    ctx = json.loads(b.hook("why do we pin franz-go instead of confluent's client?").stdout)
    ctx = ctx["hookSpecificOutput"]["additionalContext"]
    assert "v1.17" in ctx and "confluent's cgo breaks" not in ctx

    st = json.loads(b.cli("team", "status", "--json").stdout)
    assert st["queued"] == 0 and st["from_team"]["applied"] >= 4 and st["replicator"]["connected"]
    assert "team: core, 1 shared projects; last sync" in b.cli("doctor", "--no-model-probe").stdout
    rec = json.loads(b.cli("receipts", "--source", "team", "--json").stdout)
    assert any(r["outcome"] == "synced" and r["delivered"] >= 1 for r in rec)

    # PostgreSQL's files (tables and WAL) never held the agent note or the secret; they did hold
    # the shared text (so the search can find what it looks for)
    team_server.cluster.psql("CHECKPOINT")
    for needle, want in ((b"quokka-7781", False), (SECRET.encode(), False), (b"ci-cache bucket", True)):
        found = subprocess.run(["grep", "-rlaF", needle, team_server.cluster.data], capture_output=True).stdout
        assert bool(found) is want, (needle, found)


def test_offline_writes_queue_and_two_supersedes_of_one_memory_keep_both(homes):
    a, b = homes
    a.start()
    b.start()
    old = _mid(a.cli("remember", "release builds run on the arm64 runners", "--scope", "shared", "--json"))
    assert wait_until(lambda: len(_local(b, "arm64 runners")) == 1, 30)
    b.stop()
    old_on_b = _local(b, "arm64 runners")[0]["id"]
    a.cli("remember", "release builds run on the x86 runners", "--scope", "shared", "--supersedes", str(old))
    b.cli("remember", "release builds run on the graviton runners", "--scope", "shared", "--supersedes",
          str(old_on_b))
    st = json.loads(b.cli("team", "status", "--json").stdout)
    # the daemon is down: the two writes wait in the change log, not yet in the outbox
    assert st["queued"] == 0 and st["unscanned_changes"] == 1
    b.start()  # on reconnect B's writes go out and A's come in
    assert wait_until(lambda: len(_local(a, "release builds")) == 3 == len(_local(b, "release builds"))
                      and a.current_uids() == b.current_uids() and a.all_uids() == b.all_uids(), 30)
    for h in (a, b):
        current = [m["text"] for m in _local(h, "release builds") if m["invalid_at"] is None]
        assert sorted(current) == ["release builds run on the graviton runners",
                                   "release builds run on the x86 runners"]
    hist = b.cli("history", str(old_on_b)).stdout
    assert "conflict: also superseded by" in hist and "graviton" in hist and "x86" in hist


def test_a_second_teams_role_reads_none_of_the_first_teams_rows(homes, team_server):  # noqa: F811
    import psycopg

    a, b = homes
    a.cli("remember", "team core's shared rule: squash merges only", "--scope", "shared")
    a.cli("remember", "a project rule of acme/app: no vendored deps")
    a.start()
    assert wait_until(lambda: json.loads(a.cli("team", "status", "--json").stdout)["shared_by_me"] == 2
                      and json.loads(a.cli("team", "status", "--json").stdout)["queued"] == 0, 30)
    env = dict(os.environ, PGPASSFILE=team_server.pgpass)
    os.environ["PGPASSFILE"] = team_server.pgpass
    try:
        with psycopg.connect(team_server.owner()) as owner:
            total = owner.execute("SELECT count(*) FROM recalld_events WHERE team = 'core'").fetchone()[0]
        assert total >= 2
        with psycopg.connect(team_server.url("carol")) as carol:
            assert carol.execute("SELECT count(*) FROM recalld_events").fetchone()[0] == 0
            assert carol.execute("SELECT count(*) FROM recalld_members WHERE team = 'core'").fetchone()[0] == 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                carol.execute("INSERT INTO recalld_events (event_id, team, kind, memory_uid, origin_machine) "
                              "VALUES (gen_random_uuid(), 'core', 'remember', gen_random_uuid(), 'x')")
        with psycopg.connect(team_server.url("dave")) as dave:  # in the team, shares no project
            keys = [r[0] for r in dave.execute("SELECT project_key FROM recalld_events")]
            assert keys and all(k is None for k in keys)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # not as someone else
                dave.execute("INSERT INTO recalld_events (event_id, team, kind, memory_uid, origin_machine, "
                             "origin_user) VALUES (gen_random_uuid(), 'core', 'remember', gen_random_uuid(), 'x', "
                             "'alice')")
        # append-only: a member may not delete or update, and even the owner's delete is refused
        with psycopg.connect(team_server.url("alice")) as alice:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                alice.execute("DELETE FROM recalld_events")
        with psycopg.connect(team_server.owner()) as owner:
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                owner.execute("UPDATE recalld_events SET body = '{}'")
    finally:
        del os.environ["PGPASSFILE"]
    assert env  # the child processes got the same file through Home.env


def test_join_refuses_a_password_and_a_team_the_role_is_not_in(team_server, tmp_path):  # noqa: F811
    h = Home(str(tmp_path), "c", team_server.pgpass)
    url = team_server.url("carol")
    r = h.cli("team", "join", url.replace("user=carol", "user=carol password=x"), check=False)
    assert r.returncode != 0 and "PGPASSFILE" in r.stderr
    r = h.cli("team", "join", url, "--team", "core", check=False)
    assert r.returncode != 0 and "not a member of team 'core'" in r.stderr
    assert json.loads(h.cli("team", "status", "--json").stdout) == {"joined": False, "left": None}
    h.cli("team", "join", url)
    assert json.loads(h.cli("team", "status", "--json").stdout)["team"] == "other"
    assert "left team other" in h.cli("team", "leave").stdout


def test_pulls_can_read_from_a_replica(team_server, tmp_path):  # noqa: F811
    """B pulls from a hot standby (NOTIFY stays on the primary, where B listens and pushes)."""
    try:
        replica = team_server.cluster.add_replica()
    except RuntimeError as e:
        pytest.skip(f"no replica here: {e}")
    with open(team_server.pgpass, "a", encoding="utf-8") as f:  # libpq matches the port too
        f.write(replica.pgpass_line("bob", team_server.passwords["bob"]))
    try:
        a, b = Home(str(tmp_path), "a", team_server.pgpass), Home(str(tmp_path), "b", team_server.pgpass)
        a.cli("team", "join", team_server.url("alice"))
        b.cli("team", "join", team_server.url("bob"), "--read", replica.member_conninfo("bob", "recalld_team"))
        a.start()
        b.start()
        try:
            assert b.status_file()["reader"]["replica"] is True
            a.cli("remember", "replicated: the nightly job runs at 02:00 UTC", "--scope", "shared")
            assert wait_until(lambda: _local(b, "nightly job runs at 02:00"), 30)
            b.cli("remember", "replicated: from bob, through the primary", "--scope", "shared")
            assert wait_until(lambda: _local(a, "from bob, through the primary"), 30)
            st = json.loads(b.cli("team", "status", "--json").stdout)
            assert st["read_conninfo"] and st["queued"] == 0
        finally:
            a.stop()
            b.stop()
    finally:
        replica.close()
