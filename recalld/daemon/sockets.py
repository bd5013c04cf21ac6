"""The daemon's Unix sockets (recalld/daemon/query.py, recalld/daemon/hookserver.py): reachable by
this user only, never a TCP port.

The directory (RECALLD_HOME/run) is made 0700 and must belong to this user; a socket is bound
under a temporary name, made 0600 and renamed into place, so there is no moment at which
another user could connect, and a file left by a daemon that died is replaced (the caller holds
the daemon's lock, so no live daemon owns it).
"""

import os
import socket


def bind(path: str, backlog: int = 16) -> tuple:
    """(listening socket, the socket file's inode) at `path`."""
    d = os.path.dirname(path)
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.getuid():
        raise OSError(f"{d} is not a directory of this user's")
    os.chmod(d, 0o700)
    name = os.path.basename(path)
    tmp = os.path.join(d, f".{name}.{os.getpid()}")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(tmp)
        os.chmod(tmp, 0o600)
        s.listen(backlog)
        os.replace(tmp, path)
    except BaseException:
        s.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return s, os.stat(path).st_ino


def unbind(s, path: str, inode) -> None:
    """Close and remove our own socket file: a newer daemon's socket is left alone."""
    try:
        s.close()
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass
