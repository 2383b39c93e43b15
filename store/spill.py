"""Spill files: a large tool result saved in full, beside the database, named by its hash.

The pure policy (what to spill, the stand-in text) is ``sessionwarden.domain.context.spill``; this
module only writes the bytes it is given. The rules (issue 11, "Layer 2 and 3"):

* The directory is ``spill/`` beside the database unless configured otherwise
  (:func:`default_spill_dir`); it and any parent it creates are mode 0700, and each file
  0600, whatever the umask (the modes are set with ``fchmod``/``chmod``, not left to
  ``mkdir``/``open``, which the umask masks).
* A file's name is the SHA-256 hex of its bytes plus ``.txt`` (the domain's
  ``spill_name`` agrees). The caller gives no name, so no client-supplied id can reach a
  path: nothing can escape the directory.
* Symlinks are not followed: a spill directory that is itself a symlink, or one owned by
  another user, is refused; every file operation goes through the directory's descriptor
  with ``O_NOFOLLOW``, and a symlink planted at a file's name is replaced, never written
  through.
  Symlinks *above* the spill directory (a symlinked home, say) are the user's own
  layout and are followed.
* A write is temp file → write all → fsync → rename → fsync of the directory, so a crash
  leaves either no file or the whole file, never a torn one under the final name.
* The same bytes again write nothing: an existing regular file of that name is reused
  when it holds exactly those bytes (read back and compared: a file at a hash name may
  have been truncated or edited by anyone with the user's rights), and its modification
  time is renewed (the quota's order of reference, ``domain.context.spill_quota``); any other
  file there is replaced by a whole write.
* :meth:`SpillStore.files` lists the spill files (name, size, modification time) and
  :meth:`SpillStore.remove` deletes one, for the quota's keeper (``cmd/daemon/spills.py``);
  neither follows a symlink, and only names of the form ``<64 hex>.txt`` are touched.
* Any failure raises :class:`~sessionwarden.store.errors.SpillUnavailable` with one short
  line, and leaves no temporary file; the caller falls back to inline truncation.
"""

import errno
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

import msgspec
from sessionwarden.store.errors import SpillUnavailable

__all__ = ["SPILL_DIR_NAME", "SpillRef", "SpillStore", "default_spill_dir"]

#: The spill directory's name beside the database.
SPILL_DIR_NAME = "spill"
_SUFFIX = ".txt"
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A spill file's name: what :meth:`SpillStore.files` lists and :meth:`remove` deletes.
_NAME = re.compile(r"[0-9a-f]{64}\.txt")


def default_spill_dir(db_path: Path) -> Path:
    """The spill directory for the database at ``db_path``: ``spill/`` beside it."""
    return db_path.parent / SPILL_DIR_NAME


class SpillRef(msgspec.Struct, frozen=True):
    """A saved spill file: its path, the SHA-256 hex of its bytes, and its size in bytes."""

    path: str
    sha256: str
    size: int


def _why(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, "error")


def _read_all(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, from where it is."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class SpillStore:
    """Writes spill files into one directory (created on first use)."""

    def __init__(self, directory: Path) -> None:
        """Use ``directory`` (absolute, or relative to the working directory at each put)."""
        self.directory = directory

    def put(self, content: bytes) -> SpillRef:
        """Save ``content`` under its hash and return where; idempotent.

        Raises:
            SpillUnavailable: the directory is a symlink, another user's, or cannot be
                created; or the file cannot be written (permissions, full disk).
        """
        sha = hashlib.sha256(content).hexdigest()
        name = sha + _SUFFIX
        dir_fd = self._open_dir()
        try:
            if not self._reusable(dir_fd, name, content):
                self._write(dir_fd, name, content)
        finally:
            os.close(dir_fd)
        return SpillRef(path=str(self.directory / name), sha256=sha, size=len(content))

    def files(self) -> list[tuple[str, int, int]]:
        """Every spill file: ``(name, size in bytes, modification time in ns)``.

        Empty when the directory does not exist yet (it is not created to be listed).

        Raises:
            SpillUnavailable: the directory is a symlink, another user's, or unreadable.
        """
        if not os.path.lexists(self.directory):
            return []
        dir_fd = self._open_dir()
        found = []
        try:
            for name in os.listdir(dir_fd):
                if not _NAME.fullmatch(name):
                    continue  # a temporary file being written, or not ours
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed meanwhile
                if stat.S_ISREG(info.st_mode):
                    found.append((name, info.st_size, info.st_mtime_ns))
        except OSError as exc:
            raise SpillUnavailable(
                f"{self.directory}: cannot list the spill directory ({_why(exc)})") from None
        finally:
            os.close(dir_fd)
        return found

    def remove(self, name: str) -> None:
        """Delete the spill file ``name`` (gone already: nothing to do).

        Raises:
            SpillUnavailable: ``name`` is not a spill file's name, or cannot be deleted.
        """
        if not _NAME.fullmatch(name):
            raise SpillUnavailable(f"{name!r} is not a spill file's name")
        dir_fd = self._open_dir()
        try:
            os.unlink(name, dir_fd=dir_fd)  # unlink never follows a symlink
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise SpillUnavailable(f"{name}: cannot delete the spill file ({_why(exc)})") from None
        finally:
            os.close(dir_fd)

    def _open_dir(self) -> int:
        """The directory's descriptor, creating it (and missing parents) 0700."""
        try:
            self._make(self.directory)
            fd = os.open(self.directory, _NOFOLLOW_DIR)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and self.directory.is_symlink():
                raise SpillUnavailable(
                    f"{self.directory}: the spill directory is a symlink; refusing to follow it"
                ) from None
            raise SpillUnavailable(
                f"{self.directory}: cannot open the spill directory ({_why(exc)})"
            ) from None
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid():
                raise SpillUnavailable(
                    f"{self.directory}: the spill directory belongs to another user"
                )
            if stat.S_IMODE(info.st_mode) != _DIR_MODE:
                os.fchmod(fd, _DIR_MODE)
        except OSError as exc:
            os.close(fd)
            raise SpillUnavailable(
                f"{self.directory}: cannot secure the spill directory ({_why(exc)})"
            ) from None
        except SpillUnavailable:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _make(directory: Path) -> None:
        """Create ``directory`` and its missing parents, each 0700 despite the umask."""
        missing: list[Path] = []
        path = directory
        while not os.path.lexists(path) and path != path.parent:
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            try:
                os.mkdir(path, _DIR_MODE)
            except FileExistsError:
                continue  # another writer made it first; the open below checks it
            os.chmod(path, _DIR_MODE, follow_symlinks=False)

    @staticmethod
    def _reusable(dir_fd: int, name: str, content: bytes) -> bool:
        """Whether ``name`` already holds a regular file of exactly ``content``.

        A file that does is touched (its modification time renewed: the quota's order).
        """
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise SpillUnavailable(f"{name}: cannot check the spill file ({_why(exc)})") from None
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(content):
            return False
        try:
            fd = os.open(name, _READ_FILE, dir_fd=dir_fd)
        except OSError:
            return False  # replaced meanwhile, or unreadable: written afresh
        try:
            # One byte past the size: a file that grew since the stat is not the same.
            held = _read_all(fd, len(content) + 1)
            same = held == content
            if same:
                os.utime(fd)
        except OSError:
            return False
        finally:
            os.close(fd)
        return same

    def _write(self, dir_fd: int, name: str, content: bytes) -> None:
        """Write ``content`` to ``name``: temp → fsync → rename → fsync of the directory."""
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(temp, flags, _FILE_MODE, dir_fd=dir_fd)
        except OSError as exc:
            raise SpillUnavailable(
                f"{self.directory}: cannot create a spill file ({_why(exc)})"
            ) from None
        try:
            try:
                os.fchmod(fd, _FILE_MODE)
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            # rename() replaces the directory entry, so a symlink planted at ``name`` is
            # replaced, not written through.
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        except OSError as exc:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except OSError:
                pass  # already renamed, or the directory is gone: nothing left to clean
            raise SpillUnavailable(
                f"{self.directory}: cannot write a spill file ({_why(exc)})"
            ) from None
