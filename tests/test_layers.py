"""The layout is the architecture: these tests read every module's imports (statically, so a
lazy import inside a function counts too) and hold the package to its one rule."""

import ast
import sys
from pathlib import Path

import recalld

PKG = Path(recalld.__file__).resolve().parent
MAX_LINES = 600


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(path: Path) -> set:
    """Every module `path` imports, anywhere in the file (resolved to the deepest known module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports are not used in this package; resolve anyway
                base = _module_name(path).split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                full = f"{mod}.{a.name}"
                out.add(full if full in MODULES else mod)
    return out


def _internal_edges() -> dict:
    graph = {}
    for name, path in MODULES.items():
        deps = set()
        for imp in _imports(path):
            if imp.split(".")[0] != "recalld":
                continue
            # `from recalld.core import db` names recalld.core.db; a parent package's __init__
            # is not an edge worth following (it holds no code that imports back).
            while imp not in MODULES and "." in imp:
                imp = imp.rsplit(".", 1)[0]
            if imp != name and not name.startswith(imp + ".") and imp != "recalld":
                deps.add(imp)
        graph[name] = deps
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_hot_path_imports_only_the_standard_library_and_itself():
    hot = set(recalld.HOT_PACKAGES)
    bad = []
    for name, path in MODULES.items():
        if _layer(name) not in hot:
            continue
        for imp in _imports(path):
            top = imp.split(".")[0]
            if top == "recalld":
                # the package root (`from recalld import HOT_PACKAGES`) is stdlib-only too
                target = imp.split(".")
                if len(target) > 1 and f"recalld.{target[1]}" in MODULES and target[1] not in hot:
                    bad.append(f"{name} imports {imp}")
            elif top not in sys.stdlib_module_names:
                bad.append(f"{name} imports {imp}")
    assert bad == []


def test_nothing_outside_the_hot_path_is_imported_by_it_and_the_entry_point_stays_light():
    # entry.py dispatches `recalld hook` before click is imported
    imports = _imports(MODULES["recalld.entry"])
    tops = {i.split(".")[0] for i in imports}
    assert tops <= set(sys.stdlib_module_names) | {"recalld"}


def test_no_import_cycles():
    graph = _internal_edges()
    state, stack, cycles = {}, [], []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert cycles == [], " | ".join(" -> ".join(c) for c in cycles)


def test_layers_import_downwards_only():
    """The daemon never imports the CLI; nothing but the CLI and entry imports the CLI."""
    graph = _internal_edges()
    bad = [f"{a} -> {b}" for a, deps in graph.items() for b in deps
           if _layer(b) == "cli" and _layer(a) not in ("cli",) and a != "recalld.entry"]
    assert bad == []


def test_every_file_is_under_the_line_limit():
    long = {name: n for name, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_daemons_modules_import_no_native_model_library():
    """The daemon's models run in worker processes (recalld/daemon/models.py): none of its own
    modules imports llama.cpp, and what it reaches of the model runtime refuses to load a model
    once the worker is the provider (tests/test_model_worker.py runs the real process and reads
    its memory map)."""
    native = ("llama_cpp", "ggml")
    bad = [f"{name} imports {imp}" for name, path in MODULES.items() if _layer(name) == "daemon"
           for imp in _imports(path) if imp.split(".")[0] in native]
    assert not bad, bad


def test_core_holds_only_what_the_hook_imports():
    """recalld/core is the hook's library: every module in it is reached from recalld/hook's
    imports (lazy ones too). A module only the CLI, doctor or a benchmark needs lives outside
    (recalld/crystals/admin.py, recalld/cli/settings_doc.py), so core stays small and fast to read."""
    graph = _internal_edges()
    seen, todo = set(), [m for m in MODULES if _layer(m) == "hook"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(graph.get(m, ()))
    core = {m for m in MODULES if _layer(m) == "core" and m != "recalld.core"}
    assert sorted(core - seen) == []


def test_only_the_memories_module_writes_new_memory_rows():
    # A memory's row (its index terms, its thread, its 'created' change) has one writer, so a
    # column added there reaches every path: a remember, an import, an approval, the team's.
    import re

    insert = re.compile(r"INSERT\s+INTO\s+memories\b(?!_)", re.I)
    writers = sorted(name for name, p in MODULES.items() if insert.search(p.read_text()))
    assert writers == ["recalld.memories"]
