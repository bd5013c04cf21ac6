"""How a model process ended, in words and with the fix; what a role's off switch is keyed on
(the model file and the llama-cpp-python build); and the probe `recalld doctor` and `recalld
install` run: the model loaded in a child process with a time limit, plus one tiny call.

Nothing here imports llama_cpp: the build is read from the installed files.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REBUILD = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir llama-cpp-python'
PROBE_TIMEOUT_S = 30.0


def signal_name(returncode: "int | None") -> "str | None":
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _fix(sig: "str | None", returncode: "int | None") -> str:
    if sig == "SIGILL":
        return ("this CPU's AMX/AVX-512 (or another instruction llama.cpp was built for) is not "
                f"usable here; rebuild: {REBUILD}")
    if sig in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE"):
        return ("the model file may be corrupt or truncated, or llama.cpp has a bug with it: "
                "`recalld models pull` it again, or choose another (`recalld models use`)")
    if sig == "SIGKILL":
        return ("killed (SIGKILL): most often the kernel's OOM killer (see `dmesg`); free memory or "
                "choose a smaller model")
    if returncode:
        return "see the worker's log (its last lines are quoted here)"
    return ""


# How it ended when the daemon killed the worker itself (the kill's SIGKILL is ours).
KILLED = {
    "ModelTimedOut": {"how": "timeout", "signal": None,
                      "fix": "the model stopped answering (stuck in native code): if it keeps happening, "
                             "choose another model (`recalld models use`) or rebuild llama-cpp-python"},
    "ModelGarbage": {"how": "garbage", "signal": None,
                     "fix": "the model answered what no model answers: pull the file again "
                            "(`recalld models pull`) or choose another"},
}


def ended(returncode: "int | None", stderr_tail: str = "") -> dict:
    """How a process that ran a model ended: {how, signal, returncode, fix, stderr}."""
    sig = signal_name(returncode)
    how = sig or (f"exit status {returncode}" if returncode is not None else "unknown")
    return {"how": how, "signal": sig, "returncode": returncode, "fix": _fix(sig, returncode),
            "stderr": last_lines(stderr_tail)}


def last_lines(text: str, n: int = 6, chars: int = 600) -> str:
    """The lines worth quoting from a dead worker's stderr: where a fatal signal hit (Python's
    faulthandler writes 'Fatal Python error: ...' and the innermost frames first), else the
    last lines (llama.cpp's own error, a traceback's end)."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("Fatal Python error"):
            return "\n".join(lines[i:i + n])[:chars]
    return "\n".join(lines[-n:])[-chars:]


def file_id(path: str) -> "list | None":
    """[size, mtime_ns] of the model file: a role switched off comes back when this changes."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def build_id() -> "list | None":
    """The installed llama-cpp-python's version and its native libraries (name, size, mtime),
    read from the files: a rebuild changes it, and a role switched off comes back."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        from importlib.metadata import version

        ver = version("llama_cpp_python")
    except Exception:
        ver = None
    libs = []
    for loc in spec.submodule_search_locations:
        for p in sorted(Path(loc).glob("lib/*")):
            try:
                st = p.stat()
            except OSError:
                continue
            libs.append([p.name, st.st_size, st.st_mtime_ns])
    return [ver, libs]


def probe(path: str, timeout_s: float = PROBE_TIMEOUT_S, env: "dict | None" = None) -> dict:
    """Load `path` in a child process (recalld.model.worker --probe) and make one tiny call.
    {"works": bool, "said": a line for a person, ...}; never raises."""
    cmd = [sys.executable, "-m", "recalld.model.worker", "--probe", str(path)]
    pkg_parent = str(Path(__file__).resolve().parents[2])
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = pkg_parent + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    try:
        cp = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, env=e)
    except subprocess.TimeoutExpired:
        return {"works": False, "model": str(path), "how": "timeout",
                "said": f"hangs: no answer within {timeout_s:g} s (the probe was killed)",
                "fix": "choose another model (`recalld models use`), or see llama-cpp-python's build"}
    except OSError as ex:
        return {"works": False, "model": str(path), "how": "not started", "said": f"the probe did not start: {ex}"}
    out = {}
    try:
        out = json.loads(cp.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    if cp.returncode == 0 and out.get("ok"):
        return {"works": True, "model": str(path), "how": "works",
                "said": f"works (loaded in {out['load_ms']:.0f} ms, one call {out['call_ms']:.0f} ms)",
                "load_ms": out["load_ms"], "call_ms": out["call_ms"]}
    if cp.returncode < 0:
        d = ended(cp.returncode, cp.stderr.decode("utf-8", "replace"))
        return {"works": False, "model": str(path), "how": d["how"],
                "said": f"crashes with {d['how']}: {d['fix']}", "fix": d["fix"], "stderr": d["stderr"]}
    err = out.get("error") or ["", last_lines(cp.stderr.decode("utf-8", "replace"), 2)]
    said = f"fails: {err[0] + ': ' if err[0] else ''}{err[1]}"[:400]
    if "cannot load" in err[1]:
        said += ("; the file may be truncated or corrupt: `recalld models pull` it again, "
                 "or choose another (`recalld models use`)")
    return {"works": False, "model": str(path), "how": "error", "said": said,
            "stderr": last_lines(cp.stderr.decode("utf-8", "replace"))}


def probe_roles(cfg: "dict | None" = None, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """{role: probe result} for the GGUF roles; a file two roles share is probed once."""
    from recalld.model.resolve import ROLES, resolve

    from concurrent.futures import ThreadPoolExecutor

    choices = {role: resolve(role, cfg) for role in ROLES}
    files = sorted({ch.path for ch in choices.values() if ch.available})
    with ThreadPoolExecutor(max(1, len(files))) as ex:  # two files: one wait, not two
        done = dict(zip(files, ex.map(lambda p: probe(p, timeout_s), files)))
    out = {}
    for role, ch in choices.items():
        out[role] = (dict(done[ch.path]) if ch.available else
                     {"works": False, "model": None, "how": "unavailable", "said": f"no model: {ch.reason}"})
    return out
