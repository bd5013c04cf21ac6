"""What every benchmark shares: percentiles, interleaved timing, where the data lies, and the
exception that says a benchmark cannot run here (no data, no model).

Benchmarks import these instead of writing their own: one percentile definition means a p99 in
one report means the same as in another.
"""

import json
import math
import os
import subprocess
import time
from pathlib import Path

import recalld

# The directory that holds the `recalld` package: a source checkout's root, or site-packages.
PACKAGE_PARENT = Path(recalld.__file__).resolve().parent.parent


class Unavailable(Exception):
    """The benchmark cannot run here: its data or its model is missing. The runner reports it
    as skipped, with this message, instead of failed."""


# --- statistics ---------------------------------------------------------------------------------


def pct(values, q: float):
    """The q-quantile (0..1) of `values` by nearest rank (the index rounded); None when empty."""
    s = sorted(values)
    if not s:
        return None
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def rounded(x, digits: int):
    return None if x is None else round(x, digits)


def wilson(k: int, n: int, z: float = 1.96) -> list:
    """The 95% Wilson score interval of k successes in n, [low, high]."""
    if not n:
        return [None, None]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(c - h, 3), round(c + h, 3)]


# --- timing -------------------------------------------------------------------------------------


def interleaved(calls: dict, rounds: int) -> dict:
    """{name: [ms, ...]}: each round calls every `calls[name](round)` once, in turn, so what
    else runs on a shared machine slows them alike and the ratios between them hold."""
    times = {k: [] for k in calls}
    for i in range(rounds):
        for k, fn in calls.items():
            t = time.perf_counter()
            fn(i)
            times[k].append((time.perf_counter() - t) * 1000)
    return times


def process(cmd: list, stdin: bytes = b"", env: "dict | None" = None):
    """A callable for `interleaved`: runs `cmd` once with `stdin`, output discarded."""
    def call(_i=None):
        return subprocess.run(cmd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return call


def child_env(**overrides) -> dict:
    """os.environ for a child process that imports the same recalld as this one."""
    env = dict(os.environ, **overrides)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    return env


def restore_home(saved: "str | None") -> None:
    """Put back the RECALLD_HOME a benchmark found (`saved = os.environ.get("RECALLD_HOME")`)
    after pointing it at stores of its own."""
    if saved is None:
        os.environ.pop("RECALLD_HOME", None)
    else:
        os.environ["RECALLD_HOME"] = saved


def load_average():
    try:
        return round(os.getloadavg()[0], 2)  # other work on the machine shows up in every figure
    except OSError:
        return None


# --- data ---------------------------------------------------------------------------------------


def source_root() -> "Path | None":
    """The source checkout this package runs from, None when it runs from an installed wheel."""
    return PACKAGE_PARENT if (PACKAGE_PARENT / "pyproject.toml").is_file() else None


def shared_dirs() -> list:
    """Where the sibling `shared` folder (LoCoMo, recorded transcripts) is looked for: next to
    the source checkout, then next to the current directory."""
    out = []
    for base in (source_root(), Path.cwd()):
        if base is not None and base.parent / "shared" not in out:
            out.append(base.parent / "shared")
    return out


def shared_path(*parts: str, what: str) -> Path:
    """The first existing `shared/<parts>`; Unavailable naming every place looked at."""
    tried = [d.joinpath(*parts) for d in shared_dirs()]
    for p in tried:
        if p.exists():
            return p
    raise Unavailable(f"{what} not found (looked at {', '.join(map(str, tried))})")


def locomo_path(data=None) -> Path:
    """--data when given, else the LoCoMo development split in the shared data folder beside the checkout."""
    if data is not None:
        return Path(data)
    try:
        return shared_path("data", "locomo", "locomo-dev.json", what="LoCoMo data")
    except Unavailable as e:
        raise Unavailable(f"{e}; pass --data PATH") from None


def transcripts_dir() -> Path:
    """The recorded Claude Code transcripts in the shared data folder beside the checkout."""
    return shared_path("data", "transcripts", "claude-code", what="the shared Claude Code transcripts")


class ServingDaemon:
    """A daemon (`argv`: its `recalld daemon run` command) on RECALLD_HOME `home`, for
    benchmarks of hooks it serves (recalld/hook/served.py): ready once its hook socket is up
    and its judge model has loaded or is off (the load is CPU a measurement must not share);
    stopped on exit."""

    def __init__(self, argv: list, env: dict, home):
        self.argv, self.env, self.home = argv, env, Path(home)

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, env=self.env,
                                     cwd=str(self.home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        sock, status = self.home / "run" / "hook.sock", self.home / "daemon" / "status.json"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}")
            try:
                st = json.loads(status.read_text())
            except (OSError, ValueError):
                st = {}
            judge = st.get("judge") or {}
            if sock.exists() and (st.get("hooks") or {}).get("listening") and (
                    judge.get("loaded") or judge.get("available") is False):
                time.sleep(2)  # its first scan and the status write settle
                return self
            time.sleep(0.2)
        raise RuntimeError("the daemon did not start serving hooks in 180 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
