"""One real hook run with its time taken apart, for `recalld.bench.load --trace`.

    RECALLD_HOOK_TRACE=FILE python3 -m recalld.bench.hooktrace EVENT [hook options] < payload

Runs recalld.hook.run exactly as `recalld hook EVENT` does (same code, same store, same
deadline, same receipt), with timers wrapped around its parts, and appends one JSON line to
FILE: the receipt's outcome and duration, and milliseconds per part:

- phases (nested function calls): `import` (the hook's own imports, before its deadline
  starts), `settings`, `scope`, `connect` (db.connect: open, pragmas, schema check), each
  source in SOURCE_ORDER (`src:...`), `stop_boundary` (the stop hook's redaction),
  `autostart`, `lazy_import` (modules the hook imports while it runs; per module in
  `imports`), `receipt` (receipts.record: the whole receipt transaction) and `run` (hook.run,
  all of it);
- sql (every statement through the hook's connections, by its first word): `begin` is the
  wait for the write lock (BEGIN IMMEDIATE returns once it holds it), `commit` the commit
  (its fsync and any WAL checkpoint it ran: `checkpoints` counts commits after which the
  database file itself changed, which only a checkpoint writes), `select`, `insert`, `pragma`.

Standard library only and nothing imported beyond what the hook imports, so the process is the
hook's; the timers cost microseconds. Instrumentation lives here, never in the hook.
"""

import os
import sys
import time

T0 = time.perf_counter()


def main() -> None:
    import _sqlite3 as sqlite3  # what the hook imports (recalld/core/db.py), not the package

    from recalld.core import jsonio

    spans: dict = {}
    sql: dict = {}
    counts = {"checkpoints": 0, "begin_busy": 0}

    def add(d, name, dt):
        d[name] = d.get(name, 0.0) + dt * 1000

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                add(spans, name, time.perf_counter() - t)
        wrapper.__name__ = getattr(fn, "__name__", name)
        return wrapper

    class Conn(sqlite3.Connection):
        def execute(self, statement, *args):
            word = statement.lstrip()[:12].split(None, 1)[0].lower() if statement.strip() else "?"
            db_file = getattr(self, "_trace_db", None)
            before = _mtime(db_file) if word == "commit" else None
            t = time.perf_counter()
            try:
                return super().execute(statement, *args)
            except sqlite3.OperationalError:
                if word == "begin":
                    counts["begin_busy"] += 1
                raise
            finally:
                add(sql, word, time.perf_counter() - t)
                if before is not None and _mtime(db_file) != before:
                    counts["checkpoints"] += 1

        def executemany(self, statement, rows):
            t = time.perf_counter()
            try:
                return super().executemany(statement, rows)
            finally:
                add(sql, statement.lstrip()[:12].split(None, 1)[0].lower(), time.perf_counter() - t)

    real_connect = sqlite3.connect

    def connect(database, *a, **kw):
        kw.setdefault("factory", Conn)
        c = real_connect(database, *a, **kw)
        c._trace_db = str(database).split("?", 1)[0].removeprefix("file:")
        return c

    sqlite3.connect = connect  # recalld.core.db calls sqlite3.connect: every hook connection is a Conn

    from recalld.core import db, receipts, scope, settings
    from recalld.hook import run as hook
    from recalld.hook.served import read_stdin  # the input as the launcher reads it

    t_imported = time.perf_counter()
    db.connect = timed("connect", db.connect)
    receipts.record = timed("receipt", receipts.record)
    settings.load = timed("settings", settings.load)
    scope.resolve = timed("scope", scope.resolve)
    hook.SOURCE_ORDER = tuple(timed(f"src:{f.__name__.strip('_')}", f) for f in hook.SOURCE_ORDER)

    # Modules the hook imports while it runs (inside its deadline) are imported by it, not
    # here: their cost goes to `lazy_import` (and per module to `imports`), and the functions
    # timed in them are wrapped once they are loaded.
    import builtins

    real_import = builtins.__import__
    later = {"recalld.hook.autostart": ("maybe_start", "autostart"),
             "recalld.hook.proposal_source": ("_queue_boundary", "stop_boundary")}
    imports: dict = {}
    depth = [0]

    def traced_import(name, globals=None, locals=None, fromlist=(), level=0):
        if depth[0] or (level == 0 and name in sys.modules and not fromlist):
            return real_import(name, globals, locals, fromlist, level)
        before = set(sys.modules)
        depth[0] += 1
        t = time.perf_counter()
        try:
            return real_import(name, globals, locals, fromlist, level)
        finally:
            dt = time.perf_counter() - t
            depth[0] -= 1
            new = set(sys.modules) - before
            if new:
                add(spans, "lazy_import", dt)
                full = f"{name}.{fromlist[0]}" if fromlist and level == 0 else name
                top = full if full in new else name if name in new else min(new, key=len)
                imports[top] = round(imports.get(top, 0.0) + dt * 1000, 3)
            for mod, (attr, label) in later.items():
                m = sys.modules.get(mod) if mod in new else None
                if m is not None:
                    setattr(m, attr, timed(label, getattr(m, attr)))

    builtins.__import__ = traced_import

    argv = sys.argv[1:]
    t = time.perf_counter()
    out, r = hook.run(argv, read_stdin, close=False)
    t_run = time.perf_counter() - t
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    line = {"event": argv[0] if argv else None, "session": r.get("session"), "outcome": r.get("outcome"),
            "error": r.get("error"), "duration_ms": r.get("duration_ms"),
            "import_ms": round((t_imported - T0) * 1000, 3), "run_ms": round(t_run * 1000, 3),
            "spans": {k: round(v, 3) for k, v in spans.items()},
            "sql": {k: round(v, 3) for k, v in sql.items()}, "imports": imports, **counts}
    fd = os.open(os.environ["RECALLD_HOOK_TRACE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (jsonio.dumps(line) + "\n").encode())  # one write: lines from many processes never mix
    finally:
        os.close(fd)
    os._exit(0)  # as the hook does: no teardown, no closing checkpoint


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, TypeError):
        return None


if __name__ == "__main__":
    main()
