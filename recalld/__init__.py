"""recalld: involuntary recall for coding agents.

The one import rule: the packages in HOT_PACKAGES are the hook's path (it runs on every prompt
and tool call) and import only the standard library and each other; everything else may
import them, never the other way round. tests/test_layers.py checks it.
"""

__version__ = "0.1.0"

HOT_PACKAGES = ("core", "agents", "crystals", "hook")
