"""Team memory inside a real client: a decision remembered on machine A (its own RECALLD_HOME and
daemon) reaches the model's first request in Claude Code on machine B, through the team's
PostgreSQL (started by the suite) and B's daemon, which then stops: the hook reads B's local
store only."""

import os
import signal
import sqlite3
import subprocess

from e2e_clients import CLIENTS
from e2e_harness import recalld_executable, scenario
from e2e_standins import Text

from recalld.bench.team import Home, wait_until
from tests.teamkit import team_server  # noqa: F401  (the fixture)

M_TEAM = "We pin franz-go in the ingest service: confluent-kafka-go's cgo breaks the static build."
P_TEAM = "Should the ingest service switch to confluent-kafka-go?"
FINAL = "Staying on franz-go."


def _sync_once(sc, text: str) -> None:
    """B's daemon up until `text` is in B's store, then stopped (SIGTERM)."""
    p = subprocess.Popen([recalld_executable(), "daemon", "run"], cwd=sc.project, env=sc.env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        def arrived():
            r = sc.recalld("search", "franz-go", "--json", check=False)
            return r.rc == 0 and text in r.stdout
        assert wait_until(arrived, 60, step_s=0.5), "the team's memory never reached B's store"
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def test_a_memory_written_on_a_reaches_the_model_on_b(team_server, tmp_path):  # noqa: F811
    client = CLIENTS["claude"]
    client.executable()  # skips when the pinned client is not installed
    a = Home(str(tmp_path), "a", team_server.pgpass)
    a.cli("team", "join", team_server.url("alice"))
    a.cli("remember", M_TEAM, "--scope", "shared", "--kind", "decision")
    a.start()

    def setup(sc):
        sc.recalld("team", "join", team_server.url("bob"))
        _sync_once(sc, M_TEAM)

    try:
        res = scenario(client, str(tmp_path / "b"), P_TEAM, lambda c: [Text(FINAL)], setup=setup,
                       env={"PGPASSFILE": team_server.pgpass})
    finally:
        a.stop()
    res.require_run()
    assert M_TEAM in res.first.raw, "the team's memory is not in the first request " + res.where()
    with sqlite3.connect(os.path.join(res.sc.recalld_home, "recalld.db")) as c:
        (source,) = c.execute("SELECT source FROM memories WHERE text = ?", (M_TEAM,)).fetchone()
    assert source.startswith("team:alice@")  # marked with where it came from
