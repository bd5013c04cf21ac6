"""Imported at start-up by every Python process whose PYTHONPATH holds this folder, which
tests/conftest.py arranges for the subprocesses of a test not marked `model` (it also sets
RECALLD_TEST_MODEL_GUARD to a file for notes). Once `recalld.model.runtime` is imported, its
Runtime refuses to load a real model and notes the attempt (tests/helpers.py, refusing_load).

Only `os` and `sys` here, both loaded before site runs: the hook's import tests run under it.
"""

import os
import sys

_ENV = "RECALLD_TEST_MODEL_GUARD"


class _GuardRuntime:
    """A meta path finder for one module: it lets the normal finder locate the module and
    patches the Runtime class right after the module body runs."""

    name = "recalld.model.runtime"

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run_body = spec.loader.exec_module

        def exec_module(module):
            run_body(module)
            module.Runtime._load = _helpers().refusing_load(module, os.environ[_ENV])

        spec.loader.exec_module = exec_module
        return spec


def _helpers():
    """tests/helpers.py, loaded by its path: the subprocess may not have the checkout on sys.path."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers.py")
    spec = importlib.util.spec_from_file_location("_recalld_test_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if os.environ.get(_ENV):
    sys.meta_path.insert(0, _GuardRuntime())
