"""Team sync: propagation from A's write to B's store through a real PostgreSQL, under load,
and the hook's cost with the replicator running against without it.

Two RECALLD_HOMEs (two "machines") on one team, each with its own `recalld daemon run`, a
throwaway PostgreSQL cluster (recalld/team/scratchpg.py), and WRITERS writer threads per side
writing shared memories for the run's length (some superseding or retracting earlier ones).
Propagation of a memory = the time its row appears in the other side's store (B's inbox time,
the same machine's clock) minus the time its write returned on A. The hook's cost: the whole
`recalld hook prompt-submit` process on B's store, interleaved runs with B's daemon (and so
its replicator) up and stopped, the same prompts, while A keeps writing.

The harness (TeamServer, Home) is also what tests/test_team*.py run on.
"""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from recalld.bench.common import Unavailable, pct

TEAM, OTHER_TEAM = "core", "other"
DBNAME = "recalld_team"
# dave is in the team but shares no project; carol is in another team
PEOPLE = {"alice": TEAM, "bob": TEAM, "dave": TEAM, "carol": OTHER_TEAM}
WRITERS = 4
IDLE_S = 20  # how long both daemons sit idle while their CPU is counted


def recalld_command() -> list:
    """The console script next to this interpreter (a worktree's venv), else `python -m recalld`."""
    exe = os.path.join(os.path.dirname(sys.executable), "recalld")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "recalld"]


class TeamServer:
    """A throwaway cluster with recalld's schema, one login role per person (PEOPLE) with a
    SCRAM password in a PGPASSFILE, and their teams."""

    def __init__(self):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise Unavailable("psycopg is not installed (pip install 'recalld[team]')") from None
        from recalld.team import scratchpg

        try:
            self.cluster = scratchpg.Cluster()
        except scratchpg.Unavailable as e:
            raise Unavailable(str(e)) from None

    def __enter__(self):
        from recalld.team import server

        c = self.cluster.start()
        try:
            c.create_database(DBNAME)
            self.passwords = {p: os.urandom(12).hex() for p in PEOPLE}
            self.pgpass = os.path.join(tempfile.mkdtemp(prefix="recalld-pgpass-"), "pgpass")
            with open(os.open(self.pgpass, os.O_WRONLY | os.O_CREAT, 0o600), "w", encoding="utf-8") as f:
                for p, pw in self.passwords.items():
                    c.create_role(p, pw)
                    f.write(c.pgpass_line(p, pw))
            with server.connect(self.owner()) as pg:
                server.install_schema(pg)
                for p, team in PEOPLE.items():
                    server.add_member(pg, team, p)
        except BaseException:
            c.close()
            raise
        return self

    def __exit__(self, *exc):
        self.cluster.close()
        try:
            os.unlink(self.pgpass)
            os.rmdir(os.path.dirname(self.pgpass))
        except OSError:
            pass

    def owner(self) -> str:
        return self.cluster.owner_conninfo(DBNAME)

    def url(self, person: str) -> str:
        return self.cluster.member_conninfo(person, DBNAME)


class Home:
    """One machine: a RECALLD_HOME, a user HOME, a clone of the project, and its daemon."""

    def __init__(self, root: str, name: str, pgpass: str, remote: str = "git@example.com:acme/app.git"):
        self.name = name
        self.dir = os.path.join(root, name)
        self.home = os.path.join(self.dir, "recalld-home")
        self.project = os.path.join(self.dir, "clone", "app")
        os.makedirs(self.home)
        os.makedirs(os.path.join(self.dir, "user"))
        os.makedirs(self.project)
        subprocess.run(["git", "init", "-q", self.project], check=True)
        subprocess.run(["git", "-C", self.project, "remote", "add", "origin", remote], check=True)
        self.env = dict(os.environ, RECALLD_HOME=self.home, HOME=os.path.join(self.dir, "user"), PGPASSFILE=pgpass)
        self.env.pop("RECALLD_AGENT", None)
        with open(os.path.join(self.home, "settings.json"), "w", encoding="utf-8") as f:
            json.dump({"models": {"judge": "off", "embedder": "off"}, "proposals": {"enabled": False}}, f)
        self.db = os.path.join(self.home, "recalld.db")
        self.daemon: "subprocess.Popen | None" = None
        self._out = None

    def cli(self, *args, check=True, stdin=None, timeout=120) -> subprocess.CompletedProcess:
        r = subprocess.run([*recalld_command(), *args], cwd=self.project, env=self.env, capture_output=True,
                           text=True, input=stdin, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"recalld {' '.join(args)} on {self.name}: rc {r.returncode}: {r.stderr.strip()}")
        return r

    def hook(self, prompt: str, session: str = "s1") -> subprocess.CompletedProcess:
        payload = json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": prompt,
                              "cwd": self.project})
        return self.cli("hook", "prompt-submit", stdin=payload, check=False)

    def start(self, wait_s: float = 60, team: bool = True) -> None:
        self._out = open(os.path.join(self.dir, "daemon.out"), "a", encoding="utf-8")
        self.daemon = subprocess.Popen([*recalld_command(), "daemon", "run"], cwd=self.project, env=self.env,
                                       stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        started = time.time()
        end = time.monotonic() + wait_s
        while time.monotonic() < end and self.daemon.poll() is None:
            st = self.status_file()
            if not team and st.get("pid") == self.daemon.pid:
                return  # its replicator is idle (not in a team) and says so
            if st.get("connected") and st.get("pid") == self.daemon.pid and st.get("written_at", "") and \
                    _epoch(st["written_at"]) >= started - 1:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}'s daemon did not connect to the team in {wait_s} s "
                           f"(rc {self.daemon.poll()}; {self.dir}/daemon.out; status {self.status_file()})")

    def status_file(self) -> dict:
        try:
            with open(os.path.join(self.home, "team-status.json"), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def kill9(self) -> None:
        """SIGKILL, as a crash: no shutdown path runs."""
        if self.daemon is not None:
            os.killpg(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait(timeout=30)
            self.daemon = None
            self._out.close()

    def stop(self) -> None:
        if self.daemon is None:
            return
        try:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait(timeout=30)
        self.daemon = None
        if self._out:
            self._out.close()

    def connect(self) -> sqlite3.Connection:
        from recalld.core import db

        return db.connect(self.db)

    def current_uids(self) -> set:
        """The team's current memories here, by global id."""
        with self.connect() as c:
            return {r[0] for r in c.execute("SELECT u.uid FROM team_uids u JOIN memories m ON m.id = u.memory_id "
                                            "WHERE m.invalid_at IS NULL")}

    def scanned(self, memory_ids) -> bool:
        """Whether every one of these local memories has been given its global id (queued)."""
        with self.connect() as c:
            have = {r[0] for r in c.execute("SELECT memory_id FROM team_uids WHERE local = 1")}
        return set(memory_ids) <= have

    def all_uids(self) -> set:
        with self.connect() as c:
            return {r[0] for r in c.execute("SELECT uid FROM team_uids")}


def _epoch(iso: str) -> float:
    import calendar

    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) + float("0." + (iso[20:26] or "0"))


class Writers:
    """`n` threads writing shared memories into one store through recalld.memories (a write returns
    once it is durable), each remembering the wall time its write returned; about one write in
    eight supersedes and one in sixteen retracts an earlier memory of the same writer."""

    def __init__(self, home: Home, n: int = WRITERS, pause_s: float = 0.1, seed: int = 0):
        self.home, self.n, self.pause_s = home, n, pause_s
        self.stop = threading.Event()
        self.written: dict = {}  # memory id -> wall time the write returned
        self.errors: list = []
        self.rng = random.Random(seed)
        self._threads: list = []
        self._lock = threading.Lock()

    def _run(self, k: int) -> None:
        from recalld import memories
        from recalld.core import db, scope

        conn = db.connect(self.home.db)
        sc = scope.Scope(project=self.home.project, agent="main")
        mine: list = []
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                text = f"{self.home.name} writer {k} note {i}: the build uses cache key {os.urandom(4).hex()}"
                roll = self.rng.random()
                try:
                    if mine and roll < 1 / 16:
                        memories.retract(conn, mine.pop(0), "no longer true", sc)
                        continue
                    sup = [mine.pop(0)] if mine and roll < 3 / 16 else []
                    res = memories.remember(conn, text, sc, scope="shared", supersedes=sup, check_similar=False)
                    with self._lock:
                        self.written[res.memory["id"]] = time.time()
                    mine.append(res.memory["id"])
                except Exception as e:  # a locked store past its busy timeout: counted, not hidden
                    self.errors.append(f"{type(e).__name__}: {e}")
                self.stop.wait(self.pause_s)
        finally:
            conn.close()

    def __enter__(self):
        for k in range(self.n):
            t = threading.Thread(target=self._run, args=(k,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self._threads:
            t.join(timeout=60)


def wait_until(pred, timeout_s: float, step_s: float = 0.2) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step_s)
    return pred()


def join_both(srv: TeamServer, a: Home, b: Home) -> None:
    a.cli("team", "join", srv.url("alice"), "--project")
    b.cli("team", "join", srv.url("bob"), "--project")


def propagation(a: Home, b: Home, written: dict) -> list:
    """Seconds from each of A's writes returning to its row in B's store (the inbox time)."""
    with a.connect() as ca:
        uid_of = {r[0]: r[1] for r in ca.execute("SELECT memory_id, uid FROM team_uids WHERE local = 1")}
    with b.connect() as cb:
        arrived = {r[0]: _epoch(r[1]) for r in cb.execute(
            "SELECT memory_uid, time FROM team_inbox WHERE kind = 'remember' AND outcome = 'applied'")}
    out = []
    for mid, t in written.items():
        uid = uid_of.get(mid)
        if uid in arrived:
            out.append(arrived[uid] - t)
    return out


def copy_store(src: Home, dst: Home) -> None:
    """dst's store becomes a copy of src's (SQLite's online backup), memories and team tables alike."""
    with src.connect() as cs, sqlite3.connect(dst.db) as cd:
        cs.backup(cd)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hook_ms(home: Home, prompts: list) -> list:
    out = []
    for p in prompts:
        t = time.perf_counter()
        home.hook(p)
        out.append((time.perf_counter() - t) * 1000)
    return out


def run(quick: bool = False, seconds: "float | None" = None) -> dict:
    seconds = seconds or (15 if quick else 60)
    root = tempfile.mkdtemp(prefix="recalld-bench-team-")
    with TeamServer() as srv:
        a, b = Home(root, "a", srv.pgpass), Home(root, "b", srv.pgpass)
        join_both(srv, a, b)
        a.start()
        b.start()
        try:
            t0 = time.time()
            with Writers(a, seed=1) as wa, Writers(b, seed=2) as wb:
                time.sleep(seconds)
            load = os.getloadavg()
            settle = wait_until(lambda: a.scanned(wa.written) and b.scanned(wb.written)
                                and a.current_uids() == b.current_uids() and a.all_uids() == b.all_uids(), 60)
            lat_ab = propagation(a, b, wa.written)
            lat_ba = propagation(b, a, wb.written)
            # The hook's cost: B (in the team, its replicator applying A's writes as they come) against
            # C (a copy of B's store that then left the team), both daemons up, runs interleaved
            # (the order alternating within each pair).
            c = Home(root, "c", srv.pgpass)
            copy_store(b, c)
            c.cli("team", "leave")
            c.start(team=False)
            idle = {"in_team": _cpu_s(b.daemon.pid), "not_in_team": _cpu_s(c.daemon.pid)}
            time.sleep(IDLE_S)
            idle = {"in_team": _cpu_s(b.daemon.pid) - idle["in_team"],
                    "not_in_team": _cpu_s(c.daemon.pid) - idle["not_in_team"]}
            prompts = [f"which cache key does the build use for writer {k}?" for k in range(10 if quick else 150)]
            up, down = [], []
            try:
                # C gets as many writes as B, written locally, so the pair differs in the replicator only
                with Writers(a, n=2, seed=3), Writers(c, n=2, seed=4):
                    for i, p in enumerate(prompts):
                        pair = ((b, up), (c, down)) if i % 2 == 0 else ((c, down), (b, up))
                        for home, out in pair:
                            out += _hook_ms(home, [p])
            finally:
                c.stop()
            # A new machine joins: it reads the team's whole log (catch-up rate)
            d = Home(root, "d", srv.pgpass)
            d.cli("team", "join", srv.url("dave"))
            t = time.monotonic()
            d.start()
            want = len(a.all_uids())
            caught = wait_until(lambda: len(d.all_uids()) >= want, 300, step_s=0.1)
            catch_up_s = time.monotonic() - t
            with d.connect() as cd:
                d_events = cd.execute("SELECT count(*) FROM team_inbox").fetchone()[0]
            d.stop()
        finally:
            a.stop()
            b.stop()
        with a.connect() as ca:
            store_size = ca.execute("SELECT count(*) FROM memories").fetchone()[0]
        events_total = _server_events(srv)
    lat = lat_ab + lat_ba
    return {
        "writers_per_side": WRITERS, "seconds": seconds, "load_average": [round(x, 2) for x in load],
        "written": {"a": len(wa.written), "b": len(wb.written)}, "writer_errors": len(wa.errors) + len(wb.errors),
        "memories_per_store_at_end": store_size, "converged": settle,
        "propagation_s": {"n": len(lat), "missing": len(wa.written) + len(wb.written) - len(lat),
                          "p50": _r(pct(lat, 0.5)), "p99": _r(pct(lat, 0.99)),
                          "max": _r(max(lat) if lat else None), "goal_p50": 2.0,
                          "a_to_b_p50": _r(pct(lat_ab, 0.5)), "b_to_a_p50": _r(pct(lat_ba, 0.5))},
        "events_on_server": events_total,
        "new_machine_catch_up": {"events": d_events, "memories": want, "caught_up": caught,
                                 "seconds_from_daemon_start": _r(catch_up_s),
                                 "events_per_s": _r(d_events / catch_up_s if catch_up_s else None)},
        "daemon_idle_cpu_s_per_min": {k: _r(v * 60 / IDLE_S) for k, v in idle.items()},
        "hook_prompt_submit_ms": {"in_team": {"p50": _r(pct(up, 0.5)), "p99": _r(pct(up, 0.99))},
                                  "not_in_team": {"p50": _r(pct(down, 0.5)),
                                                  "p99": _r(pct(down, 0.99))},
                                  "runs_each": len(up)},
        "notes": ["hook_prompt_submit_ms: the whole `recalld hook prompt-submit` process, B (in the team, "
                  "its replicator applying A's writes during the runs) interleaved with C (a copy of B's "
                  "store that left the team, as many writers writing into it locally), both daemons up "
                  "and serving their hooks. "
                  "daemon_idle_cpu_s_per_min: the same two daemons with nothing written anywhere."],
    }


def _server_events(srv: TeamServer) -> int:
    from recalld.team import server

    with server.connect(srv.owner()) as pg:
        return pg.execute("SELECT count(*) FROM recalld_events").fetchone()[0]


def _r(v):
    return None if v is None else round(v, 3)


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
