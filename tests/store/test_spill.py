import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.spill import spill_bytes, spill_name
from sessionwarden.store.errors import SpillUnavailable, StoreUnavailable
from sessionwarden.store.spill import SpillRef, SpillStore, default_spill_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_the_default_directory_is_beside_the_database(tmp_path: Path) -> None:
    assert default_spill_dir(tmp_path / "events.db") == tmp_path / "spill"


@pytest.mark.parametrize("umask", [0, 0o277])
def test_modes_are_0700_and_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    directory = tmp_path / "state" / "spill"  # its parent is missing too
    old = os.umask(umask)
    try:
        ref = SpillStore(directory).put(b"hello\n")
    finally:
        os.umask(old)
    assert mode(directory) == 0o700
    assert mode(directory.parent) == 0o700
    assert mode(Path(ref.path)) == 0o600
    assert Path(ref.path).read_bytes() == b"hello\n"
    assert ref == SpillRef(
        path=str(directory / (hashlib.sha256(b"hello\n").hexdigest() + ".txt")),
        sha256=hashlib.sha256(b"hello\n").hexdigest(),
        size=6,
    )


def test_an_existing_loose_directory_is_tightened(tmp_path: Path, umask_zero: None) -> None:
    directory = tmp_path / "spill"
    directory.mkdir(mode=0o777)
    SpillStore(directory).put(b"x")
    assert mode(directory) == 0o700


def test_the_same_content_is_written_once(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    first = store.put(b"same bytes")
    inode = os.stat(first.path).st_ino
    assert store.put(b"same bytes") == first
    assert os.stat(first.path).st_ino == inode  # not rewritten
    assert os.listdir(tmp_path / "spill") == [Path(first.path).name]  # no temp left


def test_a_torn_file_of_the_wrong_size_is_rewritten(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    ref = store.put(b"0123456789")
    Path(ref.path).write_bytes(b"01234")
    assert store.put(b"0123456789") == ref
    assert Path(ref.path).read_bytes() == b"0123456789"


def test_a_file_of_the_right_size_and_other_bytes_is_rewritten(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    ref = store.put(b"0123456789")
    Path(ref.path).write_bytes(b"9876543210")  # an edit the size check alone let through
    assert store.put(b"0123456789") == ref
    assert Path(ref.path).read_bytes() == b"0123456789"


def test_a_reused_file_is_touched(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    ref = store.put(b"referenced again")
    os.utime(ref.path, ns=(10**18, 10**18))
    store.put(b"referenced again")
    assert os.stat(ref.path).st_mtime_ns > 10**18


def test_files_lists_spill_files_only_and_remove_deletes_one(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    assert store.files() == [] and not (tmp_path / "spill").exists()  # not created to list
    ref = store.put(b"kept")
    (tmp_path / "spill" / ".x.tmp").write_bytes(b"a temp file")
    (tmp_path / "spill" / ("0" * 64 + ".txt")).symlink_to(tmp_path / "elsewhere")
    [(name, size, mtime)] = store.files()
    assert (name, size, mtime) == (Path(ref.path).name, 4, os.stat(ref.path).st_mtime_ns)
    store.remove(name)
    store.remove(name)  # gone already: nothing to do
    assert not Path(ref.path).exists()
    with pytest.raises(SpillUnavailable):
        store.remove("../events.db")


def test_the_store_names_files_as_the_domain_does(tmp_path: Path) -> None:
    content = "résumé\n" * 100
    ref = SpillStore(tmp_path / "spill").put(spill_bytes(content))
    assert Path(ref.path).name == spill_name(content)


def test_a_symlinked_spill_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "spill").symlink_to(target)
    with pytest.raises(SpillUnavailable, match="symlink"):
        SpillStore(tmp_path / "spill").put(b"secret")
    assert list(target.iterdir()) == []


def test_a_dangling_symlink_is_refused_not_created_through(tmp_path: Path) -> None:
    (tmp_path / "spill").symlink_to(tmp_path / "made-by-us")
    with pytest.raises(SpillUnavailable, match="symlink"):
        SpillStore(tmp_path / "spill").put(b"secret")
    assert not (tmp_path / "made-by-us").exists()


def test_a_symlink_planted_at_the_file_name_is_replaced_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "spill"
    SpillStore(directory).put(b"warm-up")
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    name = hashlib.sha256(b"payload").hexdigest() + ".txt"
    (directory / name).symlink_to(victim)
    ref = SpillStore(directory).put(b"payload")
    assert victim.read_bytes() == b"keep me"
    assert not Path(ref.path).is_symlink()
    assert Path(ref.path).read_bytes() == b"payload"


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        directory = tmp_path / "spill"
        directory.mkdir(mode=0o755)
        os.chown(directory, 65534, -1)
    else:
        directory = Path("/")  # root's, and we are not root
    before = mode(directory)
    with pytest.raises(SpillUnavailable, match="belongs to another user"):
        SpillStore(directory).put(b"x")
    assert mode(directory) == before  # not touched


def test_a_directory_that_cannot_be_created_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(SpillUnavailable, match="cannot open the spill directory") as caught:
        SpillStore(tmp_path / "file" / "spill").put(b"x")
    assert isinstance(caught.value, StoreUnavailable)


_FULL_DISK = """
import os, resource, signal, sys
from pathlib import Path
from sessionwarden.store.errors import SpillUnavailable
from sessionwarden.store.spill import SpillStore

directory = Path(sys.argv[1])
SpillStore(directory).put(b"small")
# A file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    SpillStore(directory).put(b"x" * 100_000)
except SpillUnavailable as exc:
    print(exc)
    print(sorted(os.listdir(directory)))
"""


def test_a_full_disk_is_an_error_and_leaves_no_temp_file(tmp_path: Path) -> None:
    directory = tmp_path / "spill"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    message, listing = done.stdout.splitlines()
    assert message.startswith(f"{directory}: cannot write a spill file (")
    assert "Traceback" not in done.stderr
    assert listing == repr([hashlib.sha256(b"small").hexdigest() + ".txt"])


_FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # tmp_path is shared: no harm, names are hashes


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(st.binary(max_size=300))
def test_any_content_lands_inside_the_directory(tmp_path: Path, content: bytes) -> None:
    directory = tmp_path / "spill"
    ref = SpillStore(directory).put(content)
    path = Path(ref.path)
    assert path.parent == directory
    assert path.name == hashlib.sha256(content).hexdigest() + ".txt"
    assert path.read_bytes() == content and ref.size == len(content)
