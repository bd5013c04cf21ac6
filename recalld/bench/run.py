"""The benchmark runner behind `recalld bench` and `benchmarks/run`: runs this package's
benchmarks and writes one report.

The benchmarks are the modules named in BENCHMARKS (recalld/bench/NAME.py); each exposes
`run(quick: bool = False) -> dict` and may take `data=` (a data path) and options of its own.
The runner calls each (or a named subset), then writes into one directory:

    report.md      machine, date, commit, and every module's figures as tables
    figures.json   the same figures, machine-readable
    *.png          plots (only when matplotlib is installed; the report says when it is not)

A module asks for plots by returning `"plots": [{"file", "title", "kind": "line"|"bar", "x",
"series": {name: [y, ...]}, "xlabel", "ylabel"}]`, and for prose by `"notes": [str, ...]`.
Each figure sits next to its baseline because modules return both from the same run
(`{"recalld": ..., "baseline": ...}`, `{"hook_ms": ..., "bare_python_ms": ...}`).
A module that fails is reported as failed, with its error; one that raises
recalld.bench.common.Unavailable (no data, no model) as skipped, with the reason; the others
still run. `python3 -m recalld.bench.NAME [options]` runs one module alone (main_one).
"""

import contextlib
import datetime as dt
import importlib
import inspect
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path

from recalld import __version__
from recalld.bench.common import Unavailable, source_root

# Every benchmark, in the order a full run takes them: recall quality, latency, crystals, the
# background pass, capture. Each is recalld/bench/NAME.py.
BENCHMARKS = ("locomo", "search", "budget", "ablations", "scale", "load", "hookcost", "crystals", "crystal_budget",
              "rerank", "judge", "daemon", "embed", "semantic", "tells", "proposer", "capture", "team")


def load(name: str):
    return importlib.import_module(f"recalld.bench.{name}")


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except (OSError, ValueError):
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu": cpu, "cores": os.cpu_count(), "cores_usable": affinity, "memory_gib": mem,
        "os": platform.platform(), "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "recalld": __version__, "commit": _commit(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _commit() -> "str | None":
    """The source checkout's commit; None for an installed package."""
    root = source_root()
    if root is None:
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            return out.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def run_all(names=None, *, quick: bool = False, data=None, options: "dict | None" = None,
            registry: "dict | None" = None, progress=None) -> dict:
    """Run the named benchmarks (all when none); returns {"machine", "quick", "benchmarks"}.

    `options` go to every run() as keyword arguments (one module's own options, main_one);
    `registry` ({name: module or anything with run()}) replaces BENCHMARKS."""
    known = list(BENCHMARKS if registry is None else registry)
    names = list(names or known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    out = {"machine": machine(), "quick": quick, "benchmarks": {}}
    for name in names:
        if progress:
            progress(f"running {name} ...")
        t0 = time.perf_counter()
        try:
            mod = load(name) if registry is None else registry[name]
            kwargs = {"quick": quick, **(options or {})}
            if data is not None and "data" in inspect.signature(mod.run).parameters:
                kwargs["data"] = data
            # Benchmarks print progress; keep stdout clean for --json.
            with contextlib.redirect_stdout(sys.stderr):
                figures = mod.run(**kwargs)
            entry = {"ok": True, "figures": figures}
        except Unavailable as e:
            entry = {"ok": False, "skipped": str(e)}
        except Exception as e:  # one broken benchmark must not hide the others
            entry = {"ok": False, "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc(limit=8)}
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        out["benchmarks"][name] = entry
        if progress:
            progress(f"  {name}: {status(entry)} ({entry['seconds']} s)")
    return out


def status(entry: dict) -> str:
    if entry["ok"]:
        return "ok"
    if "skipped" in entry:
        return "skipped: " + entry["skipped"]
    return "FAILED: " + entry["error"]


def not_run(result: dict) -> list:
    """'NAME (skipped: why)' or 'NAME (failed)' for every benchmark that gave no figures."""
    return [f"{n} ({'skipped: ' + e['skipped'] if 'skipped' in e else 'failed'})"
            for n, e in result["benchmarks"].items() if not e["ok"]]


# --- writing the report ------------------------------------------------------------------------


def write_report(result: dict, out_dir) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots, plot_note = _plots(result, out_dir)
    clean = _without(result, "plots")
    (out_dir / "figures.json").write_text(json.dumps(clean, indent=2, default=str) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(_markdown(result, plots, plot_note), encoding="utf-8")
    return {"dir": str(out_dir), "report": str(out_dir / "report.md"), "figures": str(out_dir / "figures.json"),
            "plots": [str(out_dir / p) for p in plots], "plot_note": plot_note}


def _without(obj, key):
    if isinstance(obj, dict):
        return {k: _without(v, key) for k, v in obj.items() if k != key}
    if isinstance(obj, list):
        return [_without(v, key) for v in obj]
    return obj


def _plots(result: dict, out_dir: Path) -> tuple:
    specs = []
    for name, entry in result["benchmarks"].items():
        if entry.get("ok"):
            specs.extend((name, p) for p in (entry["figures"].get("plots") or []))
    if not specs:
        return [], None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (`pip install 'recalld[plots]'`): plots skipped"
    written = []
    for name, spec in specs:
        fname = spec.get("file") or f"{name}_{len(written)}.png"
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        x = spec["x"]
        series = spec["series"]
        if spec.get("kind") == "bar":
            width = 0.8 / max(1, len(series))
            for i, (label, ys) in enumerate(series.items()):
                ax.bar([j + i * width for j in range(len(x))], [y if y is not None else 0 for y in ys],
                       width, label=label)
            ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(x))])
            ax.set_xticklabels([str(v) for v in x])
        else:
            for label, ys in series.items():
                ax.plot(x, ys, marker="o", label=label)
            if spec.get("logx"):
                ax.set_xscale("log")
        ax.set_title(spec.get("title", name))
        ax.set_xlabel(spec.get("xlabel", ""))
        ax.set_ylabel(spec.get("ylabel", ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname)
        plt.close(fig)
        written.append(fname)
    return written, None


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool)) or (
        isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float)) for x in v) and len(v) <= 12)


def _table(d: dict, level: int) -> list:
    """Markdown for a figures dict: scalars as a key/value table, a dict of flat dicts as one
    table (rows x columns, so a figure and its baseline share a row), anything else by heading."""
    lines = []
    flat = {k: v for k, v in d.items() if _scalar(v)}
    nested = {k: v for k, v in d.items() if not _scalar(v)}
    if flat:
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in flat.items()]
        lines.append("")
    matrix = {k: v for k, v in nested.items()
              if isinstance(v, dict) and v and all(isinstance(x, dict) and all(_scalar(y) for y in x.values())
                                                   for x in v.values())}
    for k, v in nested.items():
        lines.append(f"{'#' * min(level, 6)} {k}")
        lines.append("")
        if k in matrix:
            cols = []
            for row in v.values():
                cols += [c for c in row if c not in cols]
            lines += ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            lines += [f"| {r} | " + " | ".join(_fmt(row.get(c)) for c in cols) + " |" for r, row in v.items()]
            lines.append("")
        elif isinstance(v, dict):
            lines += _table(v, level + 1)
        elif isinstance(v, list) and all(isinstance(x, dict) for x in v) and v:
            cols = []
            for row in v:
                cols += [c for c in row if c not in cols and _scalar(row[c])]
            lines += ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
            lines += ["| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |" for row in v]
            lines.append("")
        else:
            lines += [f"    {json.dumps(v, default=str)[:2000]}", ""]
    return lines


def _markdown(result: dict, plots: list, plot_note) -> str:
    m = result["machine"]
    lines = ["# recalld benchmark report", "",
             f"Date: {m['date']}. Commit: {m.get('commit') or 'none (recalld ' + str(m.get('recalld')) + ', installed)'}."
             + (" Quick mode (smaller sizes)." if result.get("quick") else ""), "",
             "## Machine", "",
             f"- CPU: {m['cpu']} ({m['cores']} cores, {m.get('cores_usable')} usable)",
             f"- Memory: {m.get('memory_gib')} GiB",
             f"- OS: {m['os']}",
             f"- Python {m['python']}, SQLite {m['sqlite']}", ""]
    if plot_note:
        lines += [f"_{plot_note}_", ""]
    for name, entry in result["benchmarks"].items():
        lines += [f"## {name}", "", f"_{entry['seconds']} s_", ""]
        if "skipped" in entry:
            lines += [f"**SKIPPED**: {entry['skipped']}", ""]
            continue
        if not entry.get("ok"):
            lines += [f"**FAILED**: `{entry['error']}`", "", "```", entry.get("traceback", "").strip(), "```", ""]
            continue
        figs = dict(entry["figures"])
        notes = figs.pop("notes", None) or []
        specs = figs.pop("plots", None) or []
        for n in notes:
            lines += [f"> {n}", ""]
        lines += _table(figs, 3)
        for spec in specs:
            f = spec.get("file")
            if f and f in plots:
                lines += [f"![{spec.get('title', f)}]({f})", ""]
    return "\n".join(lines).rstrip() + "\n"


def default_out_dir() -> Path:
    return Path.cwd() / f"recalld-bench-{dt.date.today().isoformat()}"


def json_view(result: dict) -> dict:
    """One benchmark: its figures as they are (`recalld bench locomo --json`); several: by name."""
    b = result["benchmarks"]
    if len(b) == 1:
        entry = next(iter(b.values()))
        if entry["ok"]:
            return _without(entry["figures"], "plots")
        return {"skipped": entry["skipped"]} if "skipped" in entry else {"error": entry["error"]}
    return _without({"machine": result["machine"], "benchmarks": b}, "plots")


def _finish(result: dict, out, as_json: bool, prog: str) -> int:
    if as_json:
        print(json.dumps(json_view(result), indent=2, default=str))
    if out or not as_json:
        w = write_report(result, out or default_out_dir())
        if not as_json:
            print(f"report: {w['report']}")
            if w["plot_note"]:
                print(w["plot_note"])
    missing = not_run(result)
    if missing:
        print(f"{prog}: no figures from {'; '.join(missing)}", file=sys.stderr)
    return 0 if not missing else 1


def main(argv=None) -> int:
    """`benchmarks/run [NAMES...] [--out DIR] [--quick] [--data PATH] [--json]`."""
    import argparse

    ap = argparse.ArgumentParser(prog="benchmarks/run", description="Run recalld's benchmarks and write a report.")
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    ap.add_argument("--out", help="report directory (default: ./recalld-bench-DATE)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    ap.add_argument("--data", help="data path for benchmarks that take one (LoCoMo JSON)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (no report unless --out)")
    args = ap.parse_args(argv)
    try:
        result = run_all(args.names, quick=args.quick, data=args.data,
                         progress=None if args.json else lambda s: print(s, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"benchmarks/run: {e}", file=sys.stderr)
        return 2
    return _finish(result, args.out, args.json, "benchmarks/run")


def main_one(name: str, options=(), argv=None) -> int:
    """`python3 -m recalld.bench.NAME [--quick] [--data PATH] [--json] [--out DIR] [OPTIONS]`:
    one benchmark with its own options, `options` being ((flags, argparse keywords with the
    run() parameter as dest), ...). Prints its report section (or JSON with --json)."""
    import argparse

    mod = load(name)
    ap = argparse.ArgumentParser(prog=f"python3 -m recalld.bench.{name}",
                                 description=(mod.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    if "data" in inspect.signature(mod.run).parameters:
        ap.add_argument("--data", help="the data to read (default: LoCoMo's development split in the shared data folder)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--out", help="also write a report directory here")
    for flags, kw in options:
        ap.add_argument(*((flags,) if isinstance(flags, str) else flags), **kw)
    args = vars(ap.parse_args(argv))
    quick, data, as_json, out = (args.pop(k, None) for k in ("quick", "data", "json", "out"))
    result = run_all([name], quick=bool(quick), data=data, options=args,
                     progress=None if as_json else lambda s: print(s, file=sys.stderr, flush=True))
    if as_json:
        print(json.dumps(json_view(result), indent=2, default=str))
    else:
        print(_markdown(result, [], None))
    if out:
        print(f"report: {write_report(result, out)['report']}", file=sys.stderr)
    return 0 if not not_run(result) else 1
