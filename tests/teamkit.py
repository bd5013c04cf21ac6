"""What the team tests share: a PostgreSQL cluster the suite starts itself (skipped, with the
reason, where this machine has no server binaries or no psycopg), and homes on it."""

import pytest

from recalld.bench.common import Unavailable


@pytest.fixture(scope="module")
def team_server():
    pytest.importorskip("psycopg", reason="psycopg (recalld[team], in the test extra) is not installed")
    from recalld.bench.team import TeamServer

    try:
        srv = TeamServer()
    except Unavailable as e:
        pytest.skip(f"no PostgreSQL to test against: {e}")
    with srv:
        yield srv
