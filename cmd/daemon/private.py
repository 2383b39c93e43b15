"""Keeping the daemon's files private: the state directory, the token file, the umask.

The client token spends the user's API keys, and the log holds every session's usage, so
what sessionwarden creates is its user's alone, whatever the umask: the CLI runs under
umask 077 (:data:`UMASK`), so every directory it creates is 0700 and every file (the
log, its WAL, the lock, the token) 0600. What already exists is checked:

* the default state directory must be the user's; open to anyone else, it is made 0700
  (with a warning);
* the token file must be a regular file of the user's (not a symbolic link); open to
  anyone else, it is made 0600 (with a warning);
* a directory chosen with ``--db`` that holds the token is left readable as it was (the
  token file is 0600), but others must not be able to write to it, where they could
  replace the token: their write permission is removed if the directory is the user's
  (with a warning); a sticky directory such as ``/tmp`` is fine.

What cannot be made safe (another user's file or directory, a link, a ``chmod`` that
fails) is refused with one line: :class:`~sessionwarden.cmd.errors.UnsafeFile`, exit 74.
Every check reads the mode of the file actually opened (``fstat``), not of its name.
"""

import os
import stat
from collections.abc import Callable
from pathlib import Path

from sessionwarden.cmd.errors import UnsafeFile

__all__ = ["TOKEN_ENV", "UMASK", "Warn", "private_directory", "read_private_file",
           "token_directory", "token_file"]

#: The variable that holds the clients' bearer token; without it, :func:`token_file`.
TOKEN_ENV = "SESSIONWARDEN_TOKEN"

#: The CLI's umask: nothing it creates is open to the group or to others.
UMASK = 0o077
_OTHERS = 0o077
_OTHERS_WRITE = 0o022

def token_file(db: Path) -> Path:
    """Where the clients' token is kept for the log ``db`` (the daemon makes it, 0600)."""
    return db.parent / "token"


#: Where a warning goes: stderr for the CLI, the log for the daemon.
Warn = Callable[[str], None]


def _owner() -> int:
    return os.geteuid()


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _chmod(path: Path, mode: int, what: str) -> None:
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise UnsafeFile(f"{path}: {what} is open to other users and cannot be made "
                         f"private ({exc.strerror})") from None


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot check its permissions ({exc.strerror})") from None


def private_directory(path: Path, warn: Warn, *, create: bool, owner: int | None = None
                      ) -> None:
    """Make sure ``path`` (sessionwarden's own state directory) is 0700 and the user's.

    With ``create``, the directory and any missing parent are created 0700 (whatever the
    umask). An existing one open to others is tightened; another user's is refused.
    ``owner`` is the uid expected (the effective uid by default).
    """
    if create and not path.is_dir():
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for created in missing:  # mkdir's mode (and a parent's) is masked by the umask
            os.chmod(created, 0o700)
    if not path.exists():
        return
    st = _stat(path)
    expected = _owner() if owner is None else owner
    if st.st_uid != expected:
        raise UnsafeFile(f"{path}: the state directory belongs to another user "
                         f"(uid {st.st_uid}); refusing to use it")
    if stat.S_IMODE(st.st_mode) & _OTHERS:
        _chmod(path, 0o700, "the state directory")
        warn(f"{path}: the state directory was open to other users (mode {_mode(st)}); "
             "it is 0700 now")


def token_directory(path: Path, warn: Warn, *, owner: int | None = None) -> None:
    """Make sure no one else can write to ``path``, the directory holding the token.

    A sticky directory (``/tmp``) is fine: others cannot replace a file of ours in it.
    """
    st = _stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & _OTHERS_WRITE or mode & stat.S_ISVTX:
        return
    expected = _owner() if owner is None else owner
    if st.st_uid != expected:
        raise UnsafeFile(f"{path}: other users can write to this directory (mode "
                         f"{_mode(st)}) and could replace the token file; choose a "
                         "private directory for --db or set SESSIONWARDEN_TOKEN")
    _chmod(path, mode & ~_OTHERS_WRITE, "the directory holding the token file")
    warn(f"{path}: other users could write to the directory holding the token file "
         f"(mode {_mode(st)}); it is {mode & ~_OTHERS_WRITE:04o} now")


def read_private_file(path: Path, warn: Warn, *, what: str, owner: int | None = None
                      ) -> str:
    """The text of ``path``, a regular file of the user's; made 0600 if it was open.

    Raises:
        UnsafeFile: a link, not a regular file, another user's, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        reason = "a symbolic link" if os.path.islink(path) else exc.strerror
        raise UnsafeFile(f"{path}: cannot use {what} ({reason}); remove it or set "
                         "SESSIONWARDEN_TOKEN") from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(fd)
        expected = _owner() if owner is None else owner
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path}: {what} is not a regular file; remove it or set "
                             "SESSIONWARDEN_TOKEN")
        if st.st_uid != expected:
            raise UnsafeFile(f"{path}: {what} belongs to another user (uid {st.st_uid}); "
                             "remove it or set SESSIONWARDEN_TOKEN")
        if stat.S_IMODE(st.st_mode) & _OTHERS:
            try:
                os.fchmod(fd, 0o600)
            except OSError as exc:
                raise UnsafeFile(f"{path}: {what} is open to other users and cannot be "
                                 f"made private ({exc.strerror})") from None
            warn(f"{path}: {what} was open to other users (mode {_mode(st)}); "
                 "it is 0600 now")
        return file.read().decode(errors="replace")
