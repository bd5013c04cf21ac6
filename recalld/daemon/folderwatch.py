"""Whether a crystal folder changed since it was last scanned, without a stat of every file in it.

A hook process stats every crystal file on every act (recalld/crystals/__init__.py), which is how an
edited crystal is caught: 300 files are about 2 ms of each prompt and tool call. The daemon,
serving hooks (recalld/daemon/hookserver.py), asks the kernel instead: an inotify watch on each
folder it has scanned. The kernel queues an event inside the very write, rename or unlink that
changes the folder, and the hook thread reads the queue (non-blocking) right before it relies on
its last scan, so a change finished before the hook began is always seen; a change during the
scan makes the next act scan again (each scan holds a token that any later event voids).

The watch is trusted only where it sees everything the scan would: not for a folder holding a
symlink (its target's changes are not this folder's events), not once the folder's path names
another directory (its inode is compared at every use), never after the kernel's queue
overflowed (every token is voided). Linux only (inotify through ctypes); elsewhere, or when the
kernel refuses a watch, the folder is simply scanned every time.
"""

import ctypes
import ctypes.util
import os
import struct
import threading

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED = 0x4000, 0x8000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF)
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def _ino(path: str):
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return None


class FolderWatch:
    """unchanged(folder, token) / before_scan(folder) -> token, as recalld.crystals reads them."""

    def __init__(self):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self.fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._lock = threading.Lock()
        self._wd: dict = {}  # folder -> watch descriptor
        self._folder: dict = {}  # watch descriptor -> folder
        self._clean: dict = {}  # folder -> (token, (dev, inode)) while nothing changed since that scan
        self._next = 0
        self.events = 0

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                self._clean.clear()
                return
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _, n = _EVENT.unpack_from(buf, off)
                off += _EVENT.size + n
                self.events += 1
                if mask & IN_Q_OVERFLOW:
                    self._clean.clear()
                    continue
                folder = self._folder.get(wd)
                if folder is None:
                    continue
                self._clean.pop(folder, None)
                if mask & IN_IGNORED:  # the watch is gone (the folder removed): add it again next scan
                    self._folder.pop(wd, None)
                    self._wd.pop(folder, None)

    def unchanged(self, folder: str, token) -> bool:
        """Nothing in `folder` changed since the scan that got `token` (and none began since)."""
        if token is None:
            return False
        with self._lock:
            self._drain()
            clean = self._clean.get(folder)
        return clean is not None and clean[0] == token and _ino(folder) == clean[1]

    def before_scan(self, folder: str, watchable: bool = True):
        """Call right before scanning `folder`: a token its result keeps, or None when this folder
        cannot be watched (then it is scanned every time)."""
        with self._lock:
            self._drain()
            self._clean.pop(folder, None)
            if not watchable:
                return None
            if folder not in self._wd:
                wd = self._add(self.fd, os.fsencode(folder), MASK)
                if wd < 0:
                    return None  # missing, not a directory, or the watch limit
                self._wd[folder], self._folder[wd] = wd, folder
            ino = _ino(folder)
            if ino is None:
                return None
            self._next += 1
            self._clean[folder] = (self._next, ino)
            return self._next

    def forget(self, folder: str) -> None:
        """The scan found what a watch cannot vouch for (a symlink): scan it every time."""
        with self._lock:
            self._clean.pop(folder, None)


def start() -> "FolderWatch | None":
    try:
        return FolderWatch()
    except (OSError, AttributeError):  # not Linux, or no inotify
        return None
