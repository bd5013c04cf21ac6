"""Every CLI failure is one line (issue 14, part 6).

Each case breaks the store the way bad luck does (a corrupt page, a read-only store, an
unwritable or file-typed RECALLD_HOME, a full disk) and runs the real CLI in a subprocess: one
line on stderr starting `recalld: ` and saying what is wrong, no traceback, a non-zero exit, and
the store unchanged afterwards. `recalld search` still answers on a read-only store.

Read-only and full file systems are real where this process may mount (a tmpfs, remounted
read-only, or sized to fill); elsewhere the same conditions come from file modes and
RLIMIT_FSIZE (root ignores modes, so it always mounts).
"""

import hashlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys

import pytest

from tests.helpers import REPO

WORDS = "alembic downgrade fails with OperationalError when the sqlite file is read only"


def cli(args, home, cwd, stdin=b"", preexec=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["RECALLD_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "recalld", *args], input=stdin, capture_output=True, env=env,
                          cwd=str(cwd), timeout=120, preexec_fn=preexec)


def one_line_failure(res, *needles):
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode != 0, (res.returncode, err)
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("recalld: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def seed(home, cwd, n=40):
    lines = "".join(json.dumps({"text": f"{WORDS} (note {i})"}) + "\n" for i in range(n))
    res = cli(["import", "-"], home, cwd, stdin=lines.encode())
    assert res.returncode == 0, res.stderr
    return home / "recalld.db"


def file_bytes(dbp):
    """The store's files as bytes (db, -wal): what must not change."""
    out = {}
    for suffix in ("", "-wal"):
        p = f"{dbp}{suffix}"
        if os.path.exists(p):
            with open(p, "rb") as f:
                out[suffix] = hashlib.sha256(f.read()).hexdigest() if os.path.getsize(p) else "empty"
    out.setdefault("-wal", "empty")  # an empty -wal is the same store as none
    return out


def content(dbp):
    """Everything the store holds, read without writing."""
    c = sqlite3.connect(f"file:{dbp}?mode=ro", uri=True)
    try:
        return list(c.iterdump())
    finally:
        c.close()


@pytest.fixture
def proj(tmp_path):
    p = tmp_path / "proj"
    p.mkdir()
    return p


def _can_mount(tmp_path):
    if os.geteuid() != 0:
        return False
    d = tmp_path / "probe"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True).returncode:
        return False
    subprocess.run(["umount", str(d)], check=True)
    return True


@pytest.fixture
def fs(tmp_path):
    """A place for RECALLD_HOME: a tmpfs when this process may mount (then `readonly()` and
    `size`), else a plain directory. Unmounted afterwards."""

    class FS:
        mounted = _can_mount(tmp_path)
        root = tmp_path / "fs"

        def mount(self, size="16m"):
            self.root.mkdir(exist_ok=True)
            if self.mounted:
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.root)], check=True)

        def readonly(self, *paths):
            if self.mounted:
                subprocess.run(["mount", "-o", "remount,ro", str(self.root)], check=True)
                return
            if os.geteuid() == 0:
                pytest.skip("root ignores file modes and this process may not mount a read-only file system")
            for p in paths:
                os.chmod(p, 0o555 if os.path.isdir(p) else 0o444)

    f = FS()
    yield f
    if f.mounted and os.path.ismount(f.root):
        subprocess.run(["umount", "-l", str(f.root)], check=True)
    for dirpath, dirs, files in os.walk(tmp_path):
        for name in dirs:
            os.chmod(os.path.join(dirpath, name), 0o755)


def test_corrupt_page(tmp_path, proj):
    home = tmp_path / "home"
    dbp = seed(home, proj, n=300)
    c = sqlite3.connect(dbp)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = [r[0] for r in c.execute("SELECT pageno FROM dbstat WHERE name = 'memories' AND pagetype = 'leaf'")]
    size = c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    assert len(pages) > 2
    with open(dbp, "r+b") as f:  # one leaf page of the memories table: the header still opens
        f.seek((pages[len(pages) // 2] - 1) * size)
        f.write(b"\x0d" + b"\xff" * (size - 1))
    before = file_bytes(dbp)
    for args in (["search", "alembic downgrade"], ["search", "alembic", "--json"],
                 ["remember", "a new note about pages"], ["history", str(len(pages) * 3)]):
        res = cli(args, home, proj, stdin=(json.dumps({"text": "one more"}) + "\n").encode())
        line = one_line_failure(res, "damaged", str(dbp), ".recover")
        assert "malformed" in line
    assert file_bytes(dbp) == before


def test_read_only_store_fails_writes_in_one_line_and_still_searches(fs, proj):
    fs.mount()
    home = fs.root / "home"
    dbp = seed(home, proj)
    before = content(dbp)
    fs.readonly(str(dbp), str(home))
    for args in (["remember", "a note that cannot be stored"], ["retract", "3", "--why", "no"],
                 ["import", "-"], ["config", "set", "budget_chars", "3000"]):
        res = cli(args, home, proj, stdin=(json.dumps({"text": "one more"}) + "\n").encode())
        one_line_failure(res, "not writable")
    res = cli(["remember", "x y"], home, proj)
    assert "search still works" in one_line_failure(res, str(dbp))
    res = cli(["search", "alembic downgrade", "--json"], home, proj)
    assert res.returncode == 0 and res.stderr == b"", res.stderr
    hits = json.loads(res.stdout)
    assert len(hits) == 10 and all("alembic downgrade" in h["text"] for h in hits)
    res = cli(["history", "3", "--json"], home, proj)
    assert res.returncode == 0 and json.loads(res.stdout)[0]["id"] == 3, res.stderr
    res = cli(["receipts", "--json"], home, proj)
    assert res.returncode == 0 and res.stderr == b"", res.stderr
    assert content(dbp) == before


def test_unwritable_home(fs, proj):
    fs.mount()
    home = fs.root / "home"
    home.mkdir()
    fs.readonly(str(home))
    for args in (["remember", "a note"], ["search", "alembic"], ["config", "set", "budget_chars", "3000"]):
        line = one_line_failure(cli(args, home, proj), "not writable")
        assert str(home) in line and "RECALLD_HOME" in line
    assert os.listdir(home) == []


def test_file_typed_home(tmp_path, proj):
    home = tmp_path / "home"
    home.write_text("not a directory\n")
    for args in (["remember", "a note"], ["search", "alembic"], ["import", "-"], ["history", "1"],
                 ["config", "set", "budget_chars", "3000"], ["daemon", "status"]):
        res = cli(args, home, proj, stdin=(json.dumps({"text": "one more"}) + "\n").encode())
        one_line_failure(res, "RECALLD_HOME", str(home), "is a file")
    assert home.read_text() == "not a directory\n"


def test_full_disk(fs, proj):
    """A full disk during a write: SQLite rolls the transaction back itself, and the error that
    says so must reach the user (not 'cannot rollback - no transaction is active')."""
    fs.mount(size="2m")
    home = fs.root / "home"
    dbp = seed(home, proj)
    before = content(dbp)
    big = "".join(json.dumps({"text": " ".join(f"w{i}x{j}" for j in range(40))}) + "\n" for i in range(3000))
    preexec = None
    if fs.mounted:
        st = os.statvfs(fs.root)
        with open(fs.root / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - 120 * 1024))
    else:
        limit = os.path.getsize(dbp) + 96 * 1024

        def preexec():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    res = cli(["import", "-"], home, proj, stdin=big.encode(), preexec=preexec)
    line = one_line_failure(res, str(dbp))
    assert "no transaction is active" not in line
    if fs.mounted:
        assert "is full" in line and "nothing was written" in line
    assert content(dbp) == before
    if fs.mounted:
        os.unlink(fs.root / "filler")
    res = cli(["remember", "written once there is room again"], home, proj)
    assert res.returncode == 0, res.stderr
