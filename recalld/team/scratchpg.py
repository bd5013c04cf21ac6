"""A throwaway PostgreSQL cluster in a temporary directory, for the tests and `recalld bench team`.

It uses the server binaries on PATH, else Debian's layout (/usr/lib/postgresql/N/bin). initdb
refuses to run as root, so as root the cluster belongs to the `postgres` user (its directory
chowned, every server command run through `runuser`). The owner connects over the Unix socket
without a password; members log in over 127.0.0.1 with SCRAM passwords, which they read from a
PGPASSFILE like any user.
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

OWNER = "postgres"


class Unavailable(RuntimeError):
    """No PostgreSQL server binaries here (the reason says what was looked for)."""


def find_bindir() -> str:
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(on_path))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    raise Unavailable("no PostgreSQL server binaries: initdb is not on PATH nor in /usr/lib/postgresql/*/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self):
        self.bindir = find_bindir()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                pwd.getpwnam(OWNER)
            except KeyError:
                raise Unavailable(f"running as root and there is no {OWNER!r} user to own the cluster") from None
        self.root = tempfile.mkdtemp(prefix="recalld-pg-")
        self.data = os.path.join(self.root, "data")
        self.sockdir = os.path.join(self.root, "sock")
        self.port = _free_port()
        self.logfile = os.path.join(self.root, "server.log")
        self.owner = OWNER if self.as_root else pwd.getpwuid(os.geteuid()).pw_name

    def _run(self, *args, check=True, timeout=120):
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", OWNER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)

    def start(self) -> "Cluster":
        os.makedirs(self.sockdir)
        if self.as_root:
            ent = pwd.getpwnam(OWNER)
            for d in (self.root, self.sockdir):
                os.chown(d, ent.pw_uid, ent.pw_gid)
        r = self._run("initdb", "-D", self.data, "-U", self.owner, "--auth-local=trust",
                      "--auth-host=scram-sha-256", "-E", "UTF8", "--no-instructions", check=False)
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()[-400:]}")
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a", encoding="utf-8") as f:
            f.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.sockdir}'\n"
                    "fsync = on\nmax_connections = 100\n")
        self.pg_start()
        return self

    def pg_start(self) -> None:
        r = self._run("pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60", "start", check=False)
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()[-400:]} (log {self.logfile})")

    def pg_stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "immediate", down_s: float = 0.0) -> None:
        """Stop (immediate: as a crash would, recovery on the next start) and start again."""
        self.pg_stop(mode)
        if down_s:
            time.sleep(down_s)
        self.pg_start()

    def add_replica(self) -> "Cluster":
        """A streaming hot standby of this cluster (pg_basebackup -R), on its own port: the same
        roles, passwords and rows, read-only, a moment behind."""
        rep = Cluster.__new__(Cluster)
        rep.bindir, rep.as_root, rep.owner = self.bindir, self.as_root, self.owner
        rep.root = tempfile.mkdtemp(prefix="recalld-pg-replica-")
        rep.data = os.path.join(rep.root, "data")
        rep.sockdir = os.path.join(rep.root, "sock")
        rep.port = _free_port()
        rep.logfile = os.path.join(rep.root, "server.log")
        os.makedirs(rep.sockdir)
        if self.as_root:
            ent = pwd.getpwnam(OWNER)
            for d in (rep.root, rep.sockdir):
                os.chown(d, ent.pw_uid, ent.pw_gid)
        r = self._run("pg_basebackup", "-h", self.sockdir, "-p", str(self.port), "-U", self.owner, "-D", rep.data,
                      "-R", "-X", "stream", "-c", "fast", check=False)
        if r.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {r.stderr.strip()[-400:]}")
        with open(os.path.join(rep.data, "postgresql.auto.conf"), "a", encoding="utf-8") as f:
            f.write(f"port = {rep.port}\nunix_socket_directories = '{rep.sockdir}'\n")
        rep.pg_start()
        return rep

    def owner_conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.sockdir} port={self.port} user={self.owner} dbname={dbname}"

    def member_conninfo(self, role: str, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={role} dbname={dbname} sslmode=disable"

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        r = self._run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", self.sockdir, "-p", str(self.port), "-U",
                      self.owner, "-d", dbname, "-At", "-c", sql, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"psql failed: {r.stderr.strip()}")
        return r.stdout

    def create_database(self, name: str) -> None:
        self.psql(f'CREATE DATABASE "{name}"')

    def create_role(self, role: str, password: str) -> None:
        """A login role with a SCRAM password (the server keeps only its verifier)."""
        self.psql(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")

    def pgpass_line(self, role: str, password: str, dbname: str = "*") -> str:
        return f"127.0.0.1:{self.port}:{dbname}:{role}:{password}\n"

    def close(self) -> None:
        self.pg_stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
