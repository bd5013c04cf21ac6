"""The hook's launcher, the command `recalld install` writes into an agent's settings:

    <python> -I -S <package>/hook/__main__.py hook EVENT [--agent NAME]

`-S` skips `site` (and with it every .pth file of the environment, which some run at each
interpreter start) and `-I` ignores PYTHON* variables and the user's site directory, so the
hook starts as a bare interpreter does, whatever the agent's environment sets; the package's
parent directory is put on sys.path here instead. `recalld hook EVENT` (the console script)
and `python -m recalld.hook EVENT` run the same code.
"""

import sys

if not __package__:  # run as a file: nothing but the standard library is on sys.path yet
    _here = __file__.replace("\\", "/").rsplit("/", 3)
    if sys.path and sys.path[0].replace("\\", "/").endswith("/recalld/hook"):
        del sys.path[0]  # the script's own directory (no -I): never import hook modules bare
    sys.path.insert(0, _here[0] if len(_here) == 4 else ".")

from recalld.hook.run import main  # noqa: E402 (after the path is set)

argv = sys.argv[1:]
main(argv[1:] if argv[:1] == ["hook"] else argv, exit_process=True)
