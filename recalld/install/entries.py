"""What recalld writes into an agent's settings, and how it knows its own entries again.

recalld's own entries are recognised by their command: a recalld executable (or
`python -m recalld`) followed by `hook <event>`; its MCP server is the `recalld` entry whose
command runs `recalld mcp`. What the handler and MCP entry look like for one agent is its
adapter's (recalld/agents/).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from recalld.agents import EVENTS


class InstallError(Exception):
    """A clear, one-line reason why nothing was changed."""


# --- the recalld command --------------------------------------------------------------------


def recalld_command() -> list:
    """The absolute command that runs this recalld: the console script that is running now,
    the one installed beside this interpreter, one on PATH, else `python -m recalld`."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 and argv0.name == "recalld" and argv0.is_file() and os.access(argv0, os.X_OK):
        return [str(argv0.resolve())]
    beside = Path(sys.executable).parent / ("recalld.exe" if os.name == "nt" else "recalld")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("recalld")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "recalld"]


def parse_command(command: "str | list | None") -> list:
    if command is None:
        return recalld_command()
    if isinstance(command, (list, tuple)):
        return [str(c) for c in command]
    parts = shlex.split(command)
    if not parts:
        raise InstallError("--command is empty")
    return parts


# The hook's launcher (recalld/hook/__main__.py): `<python> -I -S LAUNCHER hook EVENT` starts
# as a bare interpreter does, without site, .pth files or PYTHON* variables (docs/evaluation.md).
LAUNCHER = str(Path(__file__).resolve().parent.parent / "hook" / "__main__.py")


def hook_prefix(prefix: list) -> list:
    """What runs the hook: the launcher under the console script's own interpreter when
    `prefix` is this recalld's console script (its `#!` is this interpreter, so the launcher
    beside this module is the package it imports), else `prefix` unchanged."""
    if len(prefix) != 1 or Path(prefix[0]).name not in ("recalld", "recalld.exe"):
        return prefix
    try:
        with open(prefix[0], "rb") as f:
            first = f.readline(512)
    except OSError:
        return prefix
    if not first.startswith(b"#!"):
        return prefix
    words = first[2:].decode("utf-8", "replace").split()
    python = words[0] if len(words) == 1 else None
    try:
        if not python or not os.path.samefile(python, sys.executable) or not os.path.isfile(LAUNCHER):
            return prefix
    except OSError:
        return prefix
    return [python, "-I", "-S", LAUNCHER]


def hook_command(prefix: list, event: str, agent: "str | None") -> str:
    args = [*hook_prefix(prefix), "hook", event]
    if agent:
        args += ["--agent", agent]
    return shlex.join(args)


def _runs_recalld(prefix: list) -> bool:
    if not prefix:
        return False
    if Path(prefix[-1]).name in ("recalld", "recalld.exe"):
        return True
    if prefix[-1].replace("\\", "/").endswith("/recalld/hook/__main__.py"):
        return True
    return len(prefix) >= 2 and prefix[-2:] == ["-m", "recalld"]


def is_recalld_hook_command(cmd) -> bool:
    """True for `<recalld> hook <event> ...`, whatever the path to recalld."""
    if not isinstance(cmd, str):
        return False
    try:
        tokens = shlex.split(cmd)
    except ValueError:
        return False
    for i, tok in enumerate(tokens[:-1]):
        if tok == "hook" and tokens[i + 1] in EVENTS and _runs_recalld(tokens[:i]):
            return True
    return False


def is_recalld_handler(h) -> bool:
    return isinstance(h, dict) and is_recalld_hook_command(h.get("command"))


def is_recalld_mcp(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    args = entry.get("args") or []
    cmd = entry.get("command")
    if not isinstance(cmd, str) or not isinstance(args, list):
        return False
    full = [cmd, *[str(a) for a in args]]
    return bool(full) and full[-1] == "mcp" and _runs_recalld(full[:-1])


def importable_without_path(prefix: list) -> "str | None":
    """When the command is `python -m recalld`, check that this interpreter can import recalld
    without PYTHONPATH (as the agent will run it). Returns a warning, or None."""
    if not (len(prefix) >= 3 and prefix[-2:] == ["-m", "recalld"]):
        return None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        res = subprocess.run([*prefix[:-2], "-c", "import recalld"], cwd="/", env=env,
                             capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"could not check that {prefix[0]} can import recalld: {e}"
    if res.returncode != 0:
        return (f"{shlex.join(prefix)} does not work outside this checkout (recalld is not installed "
                f"for {prefix[0]}); the hooks will do nothing until you run `pip install -e .` "
                "or pass --command")
    return None


# --- what goes into each agent's files --------------------------------------------------------


def hook_handler(adapter, prefix: list, event: str, timeout_s: int) -> dict:
    return adapter.hook_handler(hook_command(prefix, event, adapter.hook_flag), event, timeout_s)


def hook_spec(adapter, prefix: list) -> list:
    """[(native event, matcher or None, handler)] for one agent."""
    return [(native, matcher, hook_handler(adapter, prefix, ev, t))
            for native, matcher, ev, t in adapter.install_hooks()]


def hooks_config(adapter, prefix: list) -> dict:
    """The `hooks` object recalld wants in a fresh file."""
    out: dict = {}
    for native, matcher, handler in hook_spec(adapter, prefix):
        out.setdefault(native, []).append(group(matcher, handler))
    return out


def group(matcher, handler) -> dict:
    """One matcher group: {"matcher"?, "hooks": [handler]}."""
    g: dict = {}
    if matcher is not None:
        g["matcher"] = matcher
    g["hooks"] = [handler]
    return g
