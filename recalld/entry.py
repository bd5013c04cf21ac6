"""Console entry point.

`recalld hook ...` runs on every prompt and tool call, so it is dispatched before anything
outside the standard library is imported; everything else goes to the click CLI.
"""

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from recalld.hook.run import main as hook_main

        sys.exit(hook_main(argv[1:], exit_process=True))
    from recalld.cli.main import cli

    cli(prog_name="recalld")
