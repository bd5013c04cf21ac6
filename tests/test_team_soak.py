"""The soak: 4 writers on each side for 60 s, one side's daemon killed (SIGKILL) three times and
PostgreSQL restarted once (an immediate stop, as a crash, then recovery): nothing lost,
nothing applied twice, both sides equal at the end. About 90 s; `-m 'not soak'` leaves it out."""

import os
import time

import pytest

from recalld.bench.team import Home, Writers, join_both, wait_until
from tests.teamkit import team_server  # noqa: F401  (the fixture)

SECONDS = 60


def _events_on_server(srv) -> tuple:
    import psycopg

    with psycopg.connect(srv.owner()) as pg:
        return pg.execute("SELECT count(*), count(DISTINCT event_id) FROM recalld_events").fetchone()


def _outbox(home: Home) -> int:
    with home.connect() as c:
        return c.execute("SELECT count(*) FROM team_outbox").fetchone()[0]


@pytest.mark.soak
def test_soak_kills_and_a_server_restart_lose_nothing_and_repeat_nothing(team_server, tmp_path):  # noqa: F811
    a, b = Home(str(tmp_path), "a", team_server.pgpass), Home(str(tmp_path), "b", team_server.pgpass)
    join_both(team_server, a, b)
    a.start()
    b.start()
    before = _events_on_server(team_server)[0]
    kills = restarts = 0
    try:
        with Writers(a, seed=11) as wa, Writers(b, seed=12) as wb:
            t0 = time.monotonic()
            for at, what in ((8, "kill"), (20, "kill"), (30, "pg"), (42, "kill")):
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                if what == "kill":
                    b.kill9()
                    kills += 1
                    time.sleep(1.5)  # B's writers go on; its changes wait in the change log
                    b.start()
                else:
                    team_server.cluster.restart("immediate", down_s=2.0)
                    restarts += 1
            time.sleep(max(0.0, t0 + SECONDS - time.monotonic()))
        assert (kills, restarts) == (3, 1)
        assert not wa.errors and not wb.errors, (wa.errors[:3], wb.errors[:3])
        assert len(wa.written) > 100 and len(wb.written) > 100

        def settled():  # every write queued on its side first: the last ones may not be yet
            return (a.scanned(wa.written) and b.scanned(wb.written)
                    and a.current_uids() == b.current_uids() and a.all_uids() == b.all_uids()
                    and _events_on_server(team_server)[0] - before == _outbox(a) + _outbox(b))
        assert wait_until(settled, 90, step_s=1.0), "the two sides did not converge within 90 s of the last write"
    finally:
        a.stop()
        b.stop()

    total, distinct = _events_on_server(team_server)
    assert total == distinct  # no event stored twice
    for home, writers, other in ((a, wa, b), (b, wb, a)):
        with home.connect() as c:
            # nothing lost: every write of this side has a global id, and the other side has it
            local = dict(c.execute("SELECT memory_id, uid FROM team_uids WHERE local = 1").fetchall())
            assert set(writers.written) <= set(local)
            # nothing applied twice: one memory per global id, one inbox row per event
            assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == len(home.all_uids())
            pushed = c.execute("SELECT count(*) FROM team_pushed").fetchone()[0]
            assert pushed == _outbox(home)
        assert {local[m] for m in writers.written} <= other.all_uids()
    # the same current texts on both sides
    texts = []
    for home in (a, b):
        with home.connect() as c:
            texts.append(sorted(r[0] for r in c.execute("SELECT text FROM memories WHERE invalid_at IS NULL")))
    assert texts[0] == texts[1]
    assert os.path.getsize(os.path.join(b.home, "recalld.db")) > 0
