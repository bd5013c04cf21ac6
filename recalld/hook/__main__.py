"""The hook's launcher, the command `recalld install` writes into an agent's settings:

    <python> -I -S <package>/hook/__main__.py hook EVENT [--agent NAME]

`-S` skips `site` (and with it every .pth file of the environment, which some run at each
interpreter start) and `-I` ignores PYTHON* variables and the user's site directory, so the
hook starts as a bare interpreter does, whatever the agent's environment sets; the package's
parent directory is put on sys.path here instead. `recalld hook EVENT` (the console script)
and `python -m recalld.hook EVENT` run the same code: the warm daemon runs the hook when it
listens (recalld/hook/served.py), else this process does.
"""

import gc
import sys

# A hook process lives a few milliseconds and ends in os._exit: the cyclic collector would only
# walk the objects its imports create, again and again (about a tenth of its own instructions).
gc.disable()


def _import_sqlite() -> None:
    """Import the _sqlite3 C module without importing functools.

    Its module init asks functools for `lru_cache`, only to build each connection's statement
    cache, and functools imports collections (whose namedtuple compiles source): about as many
    instructions as the rest of the hook's imports together. `functools.lru_cache(n)(f)` is the
    C wrapper `_functools._lru_cache_wrapper(f, n, False, CacheInfo)`, so the C module is handed
    exactly that; the stand-in leaves sys.modules as soon as the import returns, and a later
    `import functools` gets the real one. Anything unexpected: the plain import."""
    if "_sqlite3" in sys.modules or "functools" in sys.modules:
        return
    try:
        import _functools

        def lru_cache(maxsize=128, typed=False):
            size = max(0, maxsize) if isinstance(maxsize, int) else None  # as functools.lru_cache

            def decorating(fn):
                return _functools._lru_cache_wrapper(fn, size, typed, lambda *info: info)
            return decorating

        stand_in = type(sys)("functools")
        stand_in.lru_cache = lru_cache
        sys.modules["functools"] = stand_in
        try:
            import _sqlite3  # noqa: F401
        finally:
            if sys.modules.get("functools") is stand_in:
                del sys.modules["functools"]
    except Exception:
        sys.modules.pop("_sqlite3", None)


if not __package__:  # run as a file: nothing but the standard library is on sys.path yet
    _here = __file__.replace("\\", "/").rsplit("/", 3)
    if sys.path and sys.path[0].replace("\\", "/").endswith("/recalld/hook"):
        del sys.path[0]  # the script's own directory (no -I): never import hook modules bare
    sys.path.insert(0, _here[0] if len(_here) == 4 else ".")

from recalld.hook.served import launch  # noqa: E402 (after the path is set)

argv = sys.argv[1:]
# The warm daemon first (it needs neither _sqlite3 nor the hook's modules here), else this
# process runs the hook itself.
launch(argv[1:] if argv[:1] == ["hook"] else argv, before_run=_import_sqlite)
