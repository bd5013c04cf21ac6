"""The hook's launcher, the command `recalld install` writes into an agent's settings:

    <python> -I -S <package>/hook/__main__.py hook EVENT [--agent NAME]

`-S` skips `site` (and with it every .pth file of the environment, which some run at each
interpreter start) and `-I` ignores PYTHON* variables and the user's site directory, so the
hook starts as a bare interpreter does, whatever the agent's environment sets; the package's
parent directory is put on sys.path here instead. `recalld hook EVENT` (the console script)
and `python -m recalld.hook EVENT` run the same code: the warm daemon runs the hook when it
listens (recalld/hook/served.py), else this process does. A script is compiled on every run
(only imported modules keep their bytecode), so everything else lives in served.py.
"""

import gc
import sys

# A hook process lives a few milliseconds and ends in os._exit: the cyclic collector would only
# walk the objects its imports create, again and again (about a tenth of its own instructions).
gc.disable()

if not __package__:  # run as a file: nothing but the standard library is on sys.path yet
    _here = __file__.replace("\\", "/").rsplit("/", 3)
    if sys.path and sys.path[0].replace("\\", "/").endswith("/recalld/hook"):
        del sys.path[0]  # the script's own directory (no -I): never import hook modules bare
    sys.path.insert(0, _here[0] if len(_here) == 4 else ".")

from recalld.hook.served import import_sqlite, launch  # noqa: E402 (after the path is set)

argv = sys.argv[1:]
# The warm daemon first (it needs neither _sqlite3 nor the hook's modules here), else this
# process runs the hook itself.
launch(argv[1:] if argv[:1] == ["hook"] else argv, before_run=import_sqlite)
