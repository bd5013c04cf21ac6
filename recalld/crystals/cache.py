"""The crystal index's cache file, one per crystal folder (standard library only: every act of
the hook reads it; recalld.crystals decides what goes in).

Marshal, not JSON: decoding 300 bindings is several times faster, and the hook pays it on every
act. It lives under RECALLD_HOME with the store itself; the header pins the format, the Python
version and the directory, and anything unreadable is simply rebuilt.
"""

import _thread
import marshal
import os
import sys

from recalld.core import paths

VERSION = 4  # bump when recalld.crystals.Crystal.to_cache changes what a binding holds
_TAG = ("recalld-crystals", VERSION, tuple(sys.version_info[:2]))


def path(directory: str) -> str:
    # A 32-bit FNV-1a names the cache file: hashlib or zlib would cost the hook a module load.
    h = 0x811C9DC5
    for b in directory.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return os.path.join(str(paths.home()), "cache", f"crystals-{h:08x}.marshal")


def read(path: str, directory: str) -> tuple:
    """(sigs {name: (mtime_ns, size)}, data {name: binding dict | error str},
    hashes {name: sha256 of the file}, only for project folders)."""
    try:
        with open(path, "rb") as f:
            tag, d, sigs, data, hashes = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}, {}, {}
    if (tag != _TAG or d != directory or not isinstance(sigs, dict) or not isinstance(data, dict)
            or not isinstance(hashes, dict)):
        return {}, {}, {}
    return sigs, data, hashes


def write(path: str, directory: str, sigs: dict, data: dict, hashes: dict) -> None:
    """Atomic replace; concurrent writers (hook processes, the daemon's hook threads) may race,
    the last whole file wins and every one is right."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}-{_thread.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps((_TAG, directory, sigs, data, hashes)))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # no cache this time; the next act parses again
