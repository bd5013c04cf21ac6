"""The end-to-end harness: a scratch user and project, recalld installed the README's way, and
one real agent client run headless against a stand-in for its model API.

Nothing here touches the real user's files: every run gets its own HOME, RECALLD_HOME and git
project under pytest's tmp dir, and the client sees only the environment built here (no API
keys or settings leak in from the machine). The clients come from the npm cache that
tests/e2e/install_clients.sh fills (pins in tests/e2e/clients.txt); a client that is not there
makes its tests skip with the reason.
"""

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# Read at import, before any fixture points HOME at a scratch directory.
CLIENTS_ROOT = os.environ.get("RECALLD_E2E_CLIENTS") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                     "recalld-e2e")
RUN_TIMEOUT_S = 120  # one client run; the scripted ones here take a few seconds
CLI_TIMEOUT_S = 60


def pins() -> dict:
    """name -> (npm package, version, executable), from clients.txt."""
    out = {}
    with open(os.path.join(HERE, "clients.txt"), encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4 and not line.startswith("#"):
                out[parts[0]] = tuple(parts[1:])
    return out


def client_executable(name: str) -> str:
    """The pinned client's executable, or a skip that says why it cannot run here."""
    pkg, version, exe = pins()[name]
    prefix = os.path.join(CLIENTS_ROOT, name)
    path = os.path.join(prefix, "node_modules", ".bin", exe)
    status_file = os.path.join(CLIENTS_ROOT, f"{name}.status")
    try:
        with open(status_file, encoding="utf-8") as f:
            status = f.read().strip()
    except OSError:
        status = f"not installed: run tests/e2e/install_clients.sh (cache {CLIENTS_ROOT})"
    try:
        with open(os.path.join(prefix, "node_modules", pkg, "package.json"), encoding="utf-8") as f:
            installed = json.load(f).get("version")
    except (OSError, ValueError):
        installed = None
    if installed != version or not os.access(path, os.X_OK):
        pytest.skip(f"{pkg}@{version} cannot run here: {status}")
    return path


def client_bin_dirs() -> list:
    """The pinned clients' bin directories that exist in the cache."""
    out = []
    for name in pins():
        d = os.path.join(CLIENTS_ROOT, name, "node_modules", ".bin")
        if os.path.isdir(d):
            out.append(d)
    return out


def recalld_executable() -> str:
    """The `recalld` console script the README's install puts beside the interpreter, or the
    executable named by RECALLD_E2E_RECALLD (to test another build, e.g. an installed wheel)."""
    path = os.environ.get("RECALLD_E2E_RECALLD") or os.path.join(os.path.dirname(sys.executable), "recalld")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no recalld console script at {path}: run the README's install "
                    "(python3 -m pip install -e '.[test]')")
    return path


class Run:
    def __init__(self, argv, rc, stdout, stderr, seconds):
        self.argv, self.rc, self.stdout, self.stderr, self.seconds = argv, rc, stdout, stderr, seconds

    def tail(self, n=3000) -> str:
        return f"$ {' '.join(self.argv)}\nrc={self.rc} ({self.seconds:.1f} s)\n{self.stdout[-n:]}\n{self.stderr[-n:]}"


class Scratch:
    """One scratch user (HOME), recalld state (RECALLD_HOME) and git project."""

    def __init__(self, root: str):
        self.root = root
        self.home = os.path.join(root, "home")
        self.recalld_home = os.path.join(root, "recalld-home")
        self.project = os.path.join(root, "proj")
        self.counter_log = os.path.join(root, "hook-runs.log")
        for d in (self.home, self.project, os.path.join(root, "tmp")):
            os.makedirs(d, exist_ok=True)
        # The clients on PATH, as for a user who installed them: `recalld install codex` asks
        # the `codex` on PATH for the hooks' trust hashes.
        path = os.pathsep.join([*client_bin_dirs(), os.environ.get("PATH", "/usr/bin:/bin")])
        self.env = {
            "HOME": self.home, "RECALLD_HOME": self.recalld_home, "PATH": path,
            "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "TMPDIR": os.path.join(root, "tmp"),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        with open(os.path.join(self.home, ".gitconfig"), "w", encoding="utf-8") as f:
            f.write("[user]\n\tname = e2e\n\temail = e2e@example.invalid\n[init]\n\tdefaultBranch = main\n")
        # A project with one commit, so `git reset --hard` has a HEAD to print.
        self.git("init", "-q")
        with open(os.path.join(self.project, "README.md"), "w", encoding="utf-8") as f:
            f.write("scratch project\n")
        self.git("add", "README.md")
        self.git("commit", "-q", "-m", "init")
        self.memories: dict = {}  # "m:<id>" -> text, for checking what a receipt says it delivered
        self.crystals: dict = {}  # "c:<id>" -> a marker inside its essence
        self._crystal_checks: list = []

    def git(self, *args):
        subprocess.run(["git", *args], cwd=self.project, env=self.env, check=True, capture_output=True,
                       timeout=CLI_TIMEOUT_S)

    # --- recalld, the way a user runs it ---

    def recalld(self, *args, check=True) -> Run:
        argv = [recalld_executable(), *args]
        t = time.perf_counter()
        p = subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True, text=True,
                           timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        r = Run(argv, p.returncode, p.stdout, p.stderr, time.perf_counter() - t)
        if check and r.rc != 0:
            raise RuntimeError("recalld failed:\n" + r.tail())
        return r

    def remember(self, text: str, *flags) -> int:
        mid = json.loads(self.recalld("remember", text, *flags, "--json").stdout)["id"]
        self.memories[f"m:{mid}"] = text
        return mid

    def crystal(self, cid: str, on: str, match: str, essence: str, marker: str) -> None:
        d = os.path.join(self.project, ".recalld", "crystals")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, cid + ".md"), "w", encoding="utf-8") as f:
            f.write(f"crystal:\non: {on}\nmatch: {match}\n\nWritten by the e2e tests.\n\n"
                    f"<!-- crystal:essence -->\n{essence}\n<!-- /crystal:essence -->\n")
        self.crystals[f"c:{cid}"] = marker
        self._crystal_checks.append((cid, on.split(",")[0].strip(), match.split(",")[0].strip()))

    def trust_crystals(self) -> None:
        """`recalld crystals trust`, the user's step before a project's crystals are delivered;
        then recalld's own dry run must fire each crystal on its match, so a crystal that
        misses in a client is the client's channel, not a file recalld did not take."""
        self.recalld("crystals", "trust")
        for cid, act, text in self._crystal_checks:
            hits = json.loads(self.recalld("crystals", "test", "--act", act, text, "--json").stdout)
            if cid not in ((hits.get("crystals") or {}).get("hits") or {}):
                raise RuntimeError(f"recalld would not fire crystal {cid} on {act} {text!r}: {hits}")

    def install(self, agent: str) -> Run:
        # The README's `recalld install AGENT --user`; --no-daemon because these tests check the
        # hooks and MCP, and a daemon the session-start hook spawned would outlive the test.
        return self.recalld("install", agent, "--user", "--no-daemon", "--no-model-probe")

    def configure(self, **over) -> None:
        """Overlay the scratch user's settings.json (install may have written it); a dict value
        is merged into that group."""
        path = os.path.join(self.recalld_home, "settings.json")
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except (OSError, ValueError):
            values = {}
        for k, v in over.items():
            values[k] = dict(values.get(k) or {}, **v) if isinstance(v, dict) else v
        os.makedirs(self.recalld_home, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2)

    def stop_daemon(self) -> None:
        """Stops a daemon the session-start hook may have spawned (only when autostart is on:
        install ran with --no-daemon, so this is the guard against a process outliving us)."""
        try:
            with open(os.path.join(self.recalld_home, "settings.json"), encoding="utf-8") as f:
                autostart = (json.load(f).get("daemon") or {}).get("autostart")
        except (OSError, ValueError, AttributeError):
            autostart = None
        if autostart:
            self.recalld("daemon", "stop", check=False)

    # --- what recalld recorded ---

    def receipts(self) -> list:
        return json.loads(self.recalld("receipts", "--json").stdout or "[]")

    def hook_receipts(self) -> list:
        return [r for r in self.receipts() if r.get("source") == "hook"]

    def boundaries(self) -> list:
        path = os.path.join(self.recalld_home, "recalld.db")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return [{"native_event": r[0], "text": r[1]} for r in
                    conn.execute("SELECT native_event, text FROM proposal_boundaries ORDER BY id")]
        finally:
            conn.close()

    # --- counting hook runs independently of recalld ---

    def count_hook_runs(self, settings_path: str, ms_timeouts: bool = False) -> None:
        """Adds, beside every recalld hook group in the client's settings, a group with the same
        matcher that appends the recalld event to `counter_log`: how many times the client ran
        recalld's hook, counted without recalld, to compare with the receipts."""
        with open(settings_path, encoding="utf-8") as f:
            data = json.load(f)
        for event, groups in (data.get("hooks") or {}).items():
            added = []
            for g in groups:
                for h in g.get("hooks") or []:
                    cmd = h.get("command") or ""
                    if "recalld" in cmd and " hook " in cmd:
                        ours = cmd.split(" hook ", 1)[1].split()[0]
                        count = f"sh -c 'cat >/dev/null; echo {ours} >> \"{self.counter_log}\"'"
                        handler = {"type": "command", "command": count, "timeout": 5000 if ms_timeouts else 5}
                        if ms_timeouts:
                            handler["name"] = f"e2e-count-{ours}"
                        group = {"hooks": [handler]}
                        if "matcher" in g:
                            group["matcher"] = g["matcher"]
                        added.append(group)
            groups.extend(added)
        with open(settings_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)

    def hook_runs(self) -> Counter:
        try:
            with open(self.counter_log, encoding="utf-8") as f:
                return Counter(line.strip() for line in f if line.strip())
        except FileNotFoundError:
            return Counter()

    # --- the client ---

    def run_client(self, argv: list, extra_env: dict, timeout: int = RUN_TIMEOUT_S) -> Run:
        """Runs the client to completion in its own process group; on timeout the whole group
        (client, hooks, MCP servers) is killed and the test fails with what it printed."""
        env = dict(self.env, **extra_env)
        t = time.perf_counter()
        p = subprocess.Popen(argv, cwd=self.project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            r = Run(argv, None, out, err, time.perf_counter() - t)
            self.save("client.txt", r.tail(20000))
            pytest.fail(f"client run exceeded {timeout} s:\n{r.tail()}")
        r = Run(argv, p.returncode, out, err, time.perf_counter() - t)
        try:  # whatever the client left in its group (an MCP server, a hook) goes with it
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.save("client.txt", r.tail(20000))
        return r

    def save(self, name: str, text: str) -> str:
        path = os.path.join(self.root, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


class Result:
    """One scenario: the scratch state, the stand-in's log and the client's run."""

    def __init__(self, client, sc: Scratch, stand_in, run: Run):
        self.client, self.sc, self.stand_in, self.run = client, sc, stand_in, run
        self.main = stand_in.main_requests()
        self._receipts = None

    @property
    def first(self):
        return self.main[0]

    @property
    def receipts(self) -> list:
        if self._receipts is None:
            self._receipts = self.sc.hook_receipts()
        return self._receipts

    def where(self) -> str:
        """Where to look when a check fails: the scenario's files, and the client's output."""
        return f"(logs in {self.sc.root}: standin.log, client.txt)\n{self.run.tail(1500)}"

    def require_run(self) -> None:
        """The client must have run and asked the model at least once; otherwise no check
        below means anything (a failure here is not one of the known breaks)."""
        if self.run.rc != 0 or not self.main:
            pytest.fail(f"{self.client.name} did not complete its run ({len(self.main)} model requests) "
                        + self.where())

    def tool_outputs(self) -> list:
        """Every tool result the model was sent, per request, in order."""
        return [self.stand_in.tool_outputs(r.body) for r in self.main]


class DaemonRun:
    """`recalld daemon run` for the scratch user, in its own process group, up once
    `ready(status)` holds (`recalld daemon status --json`); stopped (SIGTERM, then SIGKILL of
    the group) on exit, whatever happened."""

    def __init__(self, sc: Scratch, ready, ready_s: float = 60, what: str = "up"):
        self.sc, self.ready, self.ready_s, self.what = sc, ready, ready_s, what

    def __enter__(self):
        self.log = open(os.path.join(self.sc.root, "daemon.out"), "w", encoding="utf-8")
        self.p = subprocess.Popen([recalld_executable(), "daemon", "run"], cwd=self.sc.project, env=self.sc.env,
                                  stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        end = time.monotonic() + self.ready_s
        st = {}
        while time.monotonic() < end and self.p.poll() is None:
            st = json.loads(self.sc.recalld("daemon", "status", "--json", check=False).stdout or "{}")
            if self.ready(st):
                return self
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"the daemon was not {self.what} in {self.ready_s} s: judge {st.get('judge')}, hooks "
                           f"{st.get('hooks')} (rc {self.p.returncode}; {self.sc.root}/daemon.out)")

    def __exit__(self, *exc):
        try:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.p.wait(timeout=10)
            self.log.close()


class ServingDaemon(DaemonRun):
    """The daemon with no judge and no proposer (only its hook threads matter here), up once it
    listens for hooks and, with the embedder on, has loaded it (the query channel listens): the
    load takes a core for a few seconds, in which hook processes are not taken in 50 ms and run
    themselves, which is start-up, not what these tests are about."""

    def __init__(self, sc: Scratch):
        def ready(st):
            embedding = (st.get("embedder") or {}).get("enabled")
            return (st.get("hooks") or {}).get("listening") and (not embedding or (st.get("query") or {}).get("listening"))
        super().__init__(sc, ready, what="listening for hooks with its embedder loaded")

    def __enter__(self):
        self.sc.configure(models={"judge": "off"}, proposals={"enabled": False})
        return super().__enter__()


def scenario(client, root: str, prompt: str, script, *, setup=None, bypass_trust=True, memories=(),
             env=None, daemon=False) -> Result:
    """A scratch user and project, memories and crystals, `recalld install`, one client run.
    `script(client)` gives the stand-in's steps; `setup(sc)` adds crystals and the like; `env`
    is added to the user's environment (recalld's commands and the client's run alike);
    `daemon`: the run happens with `recalld daemon run` up, which then serves the hooks."""
    sc = Scratch(root)
    sc.env.update(env or {})
    client.prepare(sc)
    for text, *flags in memories:
        sc.remember(text, *flags)
    if setup:
        setup(sc)
    if sc.crystals:
        sc.trust_crystals()
    sc.install(client.install_as)
    sc.count_hook_runs(client.settings_path(sc), client.ms_timeouts)
    s = client.stand_in(script(client))
    try:
        with ServingDaemon(sc) if daemon else contextlib.nullcontext(), s:
            run = client.run(sc, s, prompt, bypass_trust=bypass_trust)
    finally:
        sc.save("standin.log", s.log_text())
        sc.stop_daemon()
    return Result(client, sc, s, run)
