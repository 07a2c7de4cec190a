"""Every file operation inside a run directory: the one home of its security model.

A run directory lives on shared filesystems and under a shared ``/tmp``: every name in it may be
something another user planted. The rule (docs/design.md, "Who may touch a run directory"):

- The run's root and every folder and file mspti-lens makes in it belong to the job's user (the
  root's owner) and are writable by no one else: folders are made mode 0700, files 0600. Only a
  run made with ``record --share-group GROUP`` is shared: its root is owned by GROUP, mode 2770
  (the set-group-id bit makes every folder and file below inherit GROUP), and GROUP's members may
  then read and steer it. Whether a run is shared is read from its root alone (set-group-id and
  group-writable); nothing else says so.
- A folder is entered with ``openat(O_DIRECTORY | O_NOFOLLOW)`` from its parent's descriptor and
  checked with ``fstat`` on that descriptor; a file is opened the same way (``O_NOFOLLOW``, and
  ``O_NONBLOCK`` so a planted FIFO cannot block) and checked before a byte is read: a regular
  file, owned by the run's user (or, in a shared run, of its group), writable by no other user.
  A symlink is never followed (only the root's own path is the caller's to resolve).
- A file is written whole under a fresh temporary name (``O_CREAT | O_EXCL``: never a name that
  exists) and renamed over its name within the same folder descriptor (readers see the old file
  or the new one); a file that must not replace another is linked into place (``link`` fails if
  the name exists).

Readers (``open_run``) check the same things against the root's owner, so a file another user
slipped into a run is skipped, not read; a lazy scan of many files checks each before polars
opens it by name (a swap in between needs write access to the folder, which the rule denies).
A run at a URL (s3://, ...) is the object store's to guard: its paths go to polars as they are.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import grp
import io
import json
import os
import pwd
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_NO_LINK = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}  # copy instead
PRIVATE_DIR_MODE = 0o700
SHARED_DIR_MODE = 0o2770
PRIVATE_FILE_MODE = 0o600
SHARED_FILE_MODE = 0o660


class UntrustedError(PermissionError):
    """A folder or file of a run that mspti-lens will not use: said in one line naming the fix."""


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def group_id(name: str) -> int:
    """A group's id from its name or number; ValueError naming the groups this user is in."""
    try:
        return grp.getgrnam(name).gr_gid if not name.isdigit() else grp.getgrgid(int(name)).gr_gid
    except KeyError:
        mine = ", ".join(sorted(_group(g).split(" ")[0] for g in os.getgroups())) or "none"
        raise ValueError(f"--share-group: no group {name!r} (yours: {mine})") from None


@dataclass(frozen=True)
class Trust:
    """Who may own what in one run: ``uid`` (the run's user) and ``group`` (a shared run's group,
    or None: no group may write)."""

    uid: int
    group: int | None = None

    @classmethod
    def of_root(cls, st: os.stat_result) -> Trust:
        shared = bool(st.st_mode & stat.S_ISGID and st.st_mode & stat.S_IWGRP)
        return cls(st.st_uid, st.st_gid if shared else None)

    @property
    def dir_mode(self) -> int:
        return PRIVATE_DIR_MODE if self.group is None else SHARED_DIR_MODE

    @property
    def file_mode(self) -> int:
        return PRIVATE_FILE_MODE if self.group is None else SHARED_FILE_MODE

    def why_not(self, st: os.stat_result, what: str) -> str | None:
        """Why an entry with stat ``st`` cannot be trusted (one clause), or None if it can."""
        mode = stat.S_IMODE(st.st_mode)
        if mode & stat.S_IWOTH:
            return f"{what} is writable by every user (mode {mode:o})"
        if self.group is not None and st.st_gid == self.group:
            return None  # a shared run: any member of its group
        if st.st_uid != self.uid:
            return f"{what} belongs to {_user(st.st_uid)}, not to the run's user {_user(self.uid)}"
        if self.group is None and mode & stat.S_IWGRP:
            return f"{what} is writable by its group {_group(st.st_gid)} (mode {mode:o})"
        return None

    def may_write(self) -> str | None:
        """Why this process may not write into the run (one clause), or None if it may."""
        me = os.geteuid()
        if me == self.uid or (self.group is not None and self.group in {os.getegid(), *os.getgroups()}):
            return None
        return f"the run belongs to {_user(self.uid)}, not to you ({_user(me)})"


def _check(fd: int, trust: Trust, what: str, kind: int) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_IFMT(st.st_mode) != kind:
        raise UntrustedError(f"{what} is not a {'folder' if kind == stat.S_IFDIR else 'regular file'}")
    why = trust.why_not(st, what)
    if why:
        raise UntrustedError(why)
    return st


def _open_root(root: str, follow: bool) -> int:
    flags = _DIR_FLAGS if not follow else _DIR_FLAGS & ~_NOFOLLOW
    try:
        return os.open(root, flags)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.ENOTDIR and os.path.islink(root)):
            raise UntrustedError(f"{root} is a symlink; give the real directory") from None
        raise


class RunFolder:
    """A folder of a run: the root, or a folder below it named by ``parts`` (``host=H``,
    ``rank=R``; ``control``, ``issued``). Every operation enters it afresh from the root, each
    step without following a symlink and checked, so a folder that was removed is made again (with
    ``create``) and one replaced by a symlink is refused."""

    def __init__(self, root: str | os.PathLike, *parts: str, trust: Trust | None = None, follow_root=False):
        self.root = os.fspath(root)
        self.parts = tuple(parts)
        for p in self.parts:
            if not p or p in (".", "..") or "/" in p:
                raise ValueError(f"{p!r} is not a folder name of a run")
        self._trust = trust
        self._follow_root = follow_root

    @property
    def path(self) -> Path:
        return Path(self.root, *self.parts)

    def child(self, *parts: str) -> RunFolder:
        return RunFolder(self.root, *self.parts, *parts, trust=self._trust, follow_root=self._follow_root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- entering ------------------------------------------------------------------------------
    @property
    def trust(self) -> Trust:
        if self._trust is None:
            fd = _open_root(self.root, self._follow_root)
            try:
                self._trust = Trust.of_root(os.fstat(fd))
            finally:
                os.close(fd)
        return self._trust

    @contextlib.contextmanager
    def fd(self, create: bool = False) -> Iterator[int]:
        """A descriptor of this folder, every step checked (FileNotFoundError if a step is
        missing and not ``create``)."""
        fd = _open_root(self.root, self._follow_root)
        try:
            st = _check(fd, self.trust, self.root, stat.S_IFDIR)
            del st
            for i, name in enumerate(self.parts):
                what = os.path.join(self.root, *self.parts[: i + 1])
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):  # another process made it
                        os.mkdir(name, self.trust.dir_mode, dir_fd=fd)
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    self._own(sub)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UntrustedError(f"{what} is a symlink or not a folder") from None
                    raise
                os.close(fd)
                fd = sub
                _check(fd, self.trust, what, stat.S_IFDIR)
            yield fd
        finally:
            os.close(fd)

    def _own(self, fd: int) -> None:
        """A folder this process just made: its mode exactly (umask aside), its group if shared."""
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            return  # made by another member of a shared run at the same moment
        if self.trust.group is not None and st.st_gid != self.trust.group:
            os.fchown(fd, -1, self.trust.group)
        os.fchmod(fd, self.trust.dir_mode)

    def make(self) -> RunFolder:
        """Make this folder (and those above it, up to the root) if missing; checked."""
        with self.fd(create=True):
            return self

    def exists(self) -> bool:
        try:
            with self.fd():
                return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    # -- reading -------------------------------------------------------------------------------
    def names(self, pattern: str = "*", *, hidden: bool = False) -> list[str]:
        """The names in this folder matching ``pattern`` (sorted; [] if the folder is missing).
        A name is only a name: opening it is checked again."""
        try:
            with self.fd() as fd:
                names = os.listdir(fd)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern) and (hidden or n[0] != "."))

    def open(self, name: str) -> IO[bytes]:
        """A file of this folder opened for reading, checked first (see the module's docstring)."""
        with self.fd() as d:
            fd = self._open_file(d, name)
        f = io.FileIO(fd, "rb", closefd=True)
        f.name = os.path.join(self.path, name)  # type: ignore[misc]  # for messages
        return f

    def _open_file(self, d: int, name: str) -> int:
        _name_ok(name)
        what = os.path.join(self.path, name)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=d)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UntrustedError(f"{what} is a symlink") from None
            raise
        try:
            _check(fd, self.trust, what, stat.S_IFREG)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, name: str, limit: int = 1 << 20) -> bytes:
        """A checked file's bytes (at most ``limit``)."""
        with self.open(name) as f:
            return f.read(limit)

    def read_with(self, name: str, reader: Callable[[IO[bytes]], Any]) -> Any:
        """``reader`` (``Snapshot.load``, ...) given a checked file of this folder, opened."""
        with self.open(name) as f:
            return reader(f)

    def read_parquet(self, name: str, **kw: Any) -> Any:
        """``pl.read_parquet`` of a checked file of this folder."""
        import polars as pl

        with self.open(name) as f:
            return pl.read_parquet(f, **kw)

    def read_json(self, name: str, limit: int = 1 << 20) -> Any:
        """A checked file's JSON (ValueError if it is not JSON; OSError if missing or untrusted)."""
        return json.loads(self.read(name, limit))

    def size(self) -> int:
        """Bytes of the regular files below this folder (0 if it is missing): no symlink followed,
        a folder or file that fails its check not counted."""
        try:
            with self.fd() as d:
                return self._size(d, self.path)
        except FileNotFoundError:
            return 0

    def _size(self, d: int, where: Path) -> int:
        total = 0
        for name in os.listdir(d):
            try:
                st = os.stat(name, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
            if self.trust.why_not(st, str(where / name)):
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
            elif stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=d)
                except OSError:
                    continue  # removed or swapped for a symlink meanwhile
                try:
                    _check(sub, self.trust, str(where / name), stat.S_IFDIR)
                    total += self._size(sub, where / name)
                except UntrustedError:
                    pass
                finally:
                    os.close(sub)
        return total

    def stat(self, name: str) -> os.stat_result:
        """A name's own stat (a symlink is not followed)."""
        with self.fd() as d:
            return os.stat(name, dir_fd=d, follow_symlinks=False)

    # -- writing -------------------------------------------------------------------------------
    def _check_writer(self) -> None:
        why = self.trust.may_write()
        if why:
            raise UntrustedError(f"cannot write to {self.path}: {why}")

    def _new(self, d: int, name: str) -> int:
        fd = os.open(name, _NEW_FLAGS, self.trust.file_mode, dir_fd=d)
        if self.trust.group is not None:
            with contextlib.suppress(OSError):
                os.fchmod(fd, self.trust.file_mode)  # group-writable, umask aside
        return fd

    def _temp(self, name: str) -> str:
        return _temp_name(name)

    def write(self, name: str, data: bytes | Callable[[IO[bytes]], None], *, create: bool = True) -> None:
        """Write ``name`` whole: a fresh temporary file renamed over it. ``data`` is the bytes,
        or a function given the open file to write into (Parquet writers)."""
        _name_ok(name)
        self._check_writer()
        with self.fd(create=create) as d:
            tmp = self._temp(name)
            self._write_new(d, tmp, data)
            _rename_into_place(d, tmp, name)

    def _write_new(self, d: int, name: str, data: bytes | Callable[[IO[bytes]], None]) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=d)  # a leftover of this very process and thread
        _fill(self._new(d, name), d, name, data)

    def publish(self, name: str, data: bytes) -> bool:
        """Create ``name`` with ``data``, whole, unless it exists (False then): written under a
        temporary name and linked into place (``link`` never replaces). On NFS a retried link may
        say "exists" though it made the name: the temporary file's link count tells."""
        _name_ok(name)
        self._check_writer()
        with self.fd(create=True) as d:
            tmp = self._temp(name)
            self._write_new(d, tmp, data)
            try:
                os.link(tmp, name, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)
                return True
            except FileExistsError:
                return os.stat(tmp, dir_fd=d, follow_symlinks=False).st_nlink == 2
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=d)

    def write_frame(self, name: str, frame: Any, **kw: Any) -> None:
        """Write a polars frame as ``name``, Parquet, whole (see :meth:`write`)."""
        self.write(name, lambda f: frame.write_parquet(f, **kw))

    def link_from(self, source: RunFolder, name: str) -> None:
        """``name`` of ``source`` (checked first) as a hard link in this folder, made if missing:
        a file that never changes once written kept here even when ``source`` drops it. Where a
        link cannot be made (a filesystem without them), a copy written whole. Linked by name,
        never through a symlink, and the new name proven to be the file checked."""
        _name_ok(name)
        self._check_writer()
        with source.fd() as s, self.fd(create=True) as d:
            fd = source._open_file(s, name)
            with io.FileIO(fd, "rb", closefd=True) as f:
                want = os.fstat(fd)
                try:
                    os.link(name, name, src_dir_fd=s, dst_dir_fd=d, follow_symlinks=False)
                except FileExistsError:
                    pass  # kept before: checked below like a new link
                except OSError as e:
                    if e.errno not in _NO_LINK:
                        raise
                    self.write(name, f.read())
                    return
                got = os.stat(name, dir_fd=d, follow_symlinks=False)
                if (got.st_dev, got.st_ino) != (want.st_dev, want.st_ino):
                    raise UntrustedError(f"{self.path / name} is not {source.path / name}")

    def set_mtime(self, name: str, when: float) -> None:
        """Set a file's modification time (a symlink is not followed)."""
        with self.fd() as d:
            os.utime(name, (when, when), dir_fd=d, follow_symlinks=False)

    def remove(self, name: str) -> None:
        """Remove ``name`` (a file: a symlink is removed, never what it names); missing is fine."""
        _name_ok(name)
        try:
            with self.fd() as d:
                os.unlink(name, dir_fd=d)
        except FileNotFoundError:
            pass


def _temp_name(name: str) -> str:
    """A writer's temporary name for ``name``: hidden, and its process's and thread's own."""
    return f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"


def _fill(fd: int, d: int, name: str, data: bytes | Callable[[IO[bytes]], None]) -> None:
    """Write ``data`` into the new file ``fd`` (``name`` in folder ``d``), closed after; the
    file removed if writing fails. The one temporary-file step of every writer here."""
    try:
        with io.FileIO(fd, "wb", closefd=True) as f:
            if callable(data):
                buf = io.BufferedWriter(f)
                data(buf)
                buf.flush()
                buf.detach()
            else:
                f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=d)
        raise


def _rename_into_place(d: int, tmp: str, name: str) -> None:
    """The last step of writing a file whole: its filled temporary file renamed over ``name`` in
    the folder ``d``, or removed if that fails, so no half-made name is left behind."""
    try:
        os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=d)
        raise


def write_named_file(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> None:
    """A file the user names outside any run (``watch --metrics-file``: a textfile collector's
    ``.prom``), written whole: a fresh temporary file in its folder renamed over it, so its
    reader never sees half of it. The path is the user's own to resolve (their symlinks
    followed); the file is ``mode`` (umask aside) for its reader."""
    parent, name = os.path.split(os.path.abspath(os.fspath(path)))
    _name_ok(name)
    d = os.open(parent, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        tmp = _temp_name(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=d)
        _fill(os.open(tmp, _NEW_FLAGS, mode, dir_fd=d), d, tmp, data)
        _rename_into_place(d, tmp, name)
    finally:
        os.close(d)


def _name_ok(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"{name!r} is not a file name of a run")


# -- the run's root, for record and the controllers ----------------------------------------------
def create_run(out: str | os.PathLike, group: int | None = None, *, inherit: bool = False) -> RunFolder:
    """The root ``record --out`` writes to: made (mode 0700, or 2770 owned by ``group``) or, if
    it exists, checked: a real folder of this user, writable by no other one (group-writable
    only when shared with exactly ``group``), where this process can make a file. UntrustedError
    in one line naming the fix. With ``inherit`` (a recorded process, whose ``record`` made the
    root) an existing root shared with a group is taken as it is."""
    root = Path(os.path.abspath(os.fspath(out)))
    mode = PRIVATE_DIR_MODE if group is None else SHARED_DIR_MODE
    made = False
    try:
        root.parent.mkdir(parents=True, exist_ok=True)  # above the run: the caller's own choice
    except OSError as e:
        raise OSError(f"cannot write to {root}: {e.strerror or e}") from None
    try:
        os.mkdir(root, mode)
        made = True
    except FileExistsError:
        pass
    except OSError as e:
        raise OSError(f"cannot write to {root}: {e.strerror or e}") from None
    fix = "choose a new --out (record makes it, mode 0700)"
    try:
        fd = _open_root(str(root), follow=False)
    except UntrustedError as e:
        raise UntrustedError(f"--out {root} is a symlink: {fix}") from e
    except NotADirectoryError:
        raise UntrustedError(f"--out {root} is not a directory: {fix}") from None
    try:
        st = os.fstat(fd)
        if made:
            if group is not None:
                try:
                    os.fchown(fd, -1, group)
                except PermissionError:
                    raise UntrustedError(
                        f"--share-group {_group(group)}: you are not a member of it, so the run cannot be "
                        "given to it (`id -Gn` lists your groups)"
                    ) from None
            os.fchmod(fd, mode)
            st = os.fstat(fd)
        me = os.geteuid()
        if inherit and not made and Trust.of_root(st).group is not None:
            trust = Trust.of_root(st)
            why = trust.why_not(st, f"--out {root}") or trust.may_write()
            if why:
                raise UntrustedError(f"{why}: {fix}")
            group = trust.group
        elif st.st_uid != me:
            raise UntrustedError(
                f"--out {root} belongs to {_user(st.st_uid)}, not to you ({_user(me)}): anyone who "
                f"owns it could redirect the job's files; {fix}"
            )
        perm = stat.S_IMODE(st.st_mode)
        if perm & stat.S_IWOTH:
            raise UntrustedError(
                f"--out {root} is writable by every user (mode {perm:o}): {fix}, or `chmod o-w {root}`"
            )
        if group is None and perm & stat.S_IWGRP:
            raise UntrustedError(
                f"--out {root} is writable by its group {_group(st.st_gid)} (mode {perm:o}): "
                f"`chmod g-w {root}`, or share it on purpose with --share-group "
                f"{_group(st.st_gid).split()[0]}"
            )
        if group is not None and (st.st_gid != group or (perm & SHARED_DIR_MODE) != SHARED_DIR_MODE):
            raise UntrustedError(
                f"--out {root} is not shared with {_group(group)} (group {_group(st.st_gid)}, mode "
                f"{perm:o}): {fix}, or `chgrp {group} {root} && chmod 2770 {root}`"
            )
        folder = RunFolder(root, trust=Trust.of_root(st))
        probe = f".probe-{os.getpid()}"
        try:  # can a file be made here (a read-only or full filesystem says so now)?
            pfd = os.open(probe, _NEW_FLAGS, PRIVATE_FILE_MODE, dir_fd=fd)
            os.close(pfd)
            os.unlink(probe, dir_fd=fd)
        except OSError as e:
            raise OSError(f"cannot write to {root}: {e.strerror or e}") from None
        return folder
    finally:
        os.close(fd)


def writer_root(out: str | os.PathLike) -> RunFolder:
    """The root a recorded process writes to (see :func:`create_run`; OSError naming the fix)."""
    return create_run(out, inherit=True)


def open_run_folder(root: str | os.PathLike, *, writer: bool) -> RunFolder:
    """An existing run's root, checked (UntrustedError in one line): a real folder writable by
    no one outside the run's user (and its group when shared); for a ``writer``, one this process
    may write into."""
    path = os.fspath(root)
    try:
        fd = _open_root(path, follow=not writer)
    except NotADirectoryError:
        raise UntrustedError(f"{path} is not a directory") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    trust = Trust.of_root(st)
    perm = stat.S_IMODE(st.st_mode)
    if perm & stat.S_IWOTH:
        raise UntrustedError(
            f"{path} is writable by every user (mode {perm:o}): anyone could have planted its files"
        )
    if trust.group is None and perm & stat.S_IWGRP:
        raise UntrustedError(
            f"{path} is writable by its group {_group(st.st_gid)} (mode {perm:o}) without being a "
            "shared run (record --share-group): `chmod g-w` it"
        )
    folder = RunFolder(path, trust=trust, follow_root=not writer)
    if writer:
        why = trust.may_write()
        if why:
            raise UntrustedError(f"cannot write to {path}: {why}")
    return folder


# -- readers (open_run) --------------------------------------------------------------------------
def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def glob(root: str | os.PathLike, pattern: str) -> list[str]:
    """Paths below ``root`` matching ``pattern`` (``*/rank=*/window-*.parquet``: one fnmatch
    pattern per level), found without following a symlink and without names that start with a
    dot, each folder checked on the way (an untrusted folder is left out)."""
    levels = pattern.split("/")
    base = RunFolder(os.fspath(root).removeprefix("file://"), follow_root=True)
    out: list[str] = []

    def walk(folder: RunFolder, depth: int) -> None:
        try:
            names = folder.names(levels[depth])
        except (OSError, ValueError):
            if depth == 0:
                raise  # the root itself: said to the caller
            return  # missing, untrusted or not a folder: nothing of the run below it
        if depth == len(levels) - 1:
            out.extend(str(folder.path / n) for n in names)
            return
        for n in names:
            walk(folder.child(n), depth + 1)

    walk(base, 0)
    return sorted(out)


def _folder_of(path: str) -> tuple[RunFolder, str]:
    parent, _, name = path.removeprefix("file://").rpartition("/")
    return RunFolder(parent or "/", follow_root=True), name


def open_file(path: str | os.PathLike) -> IO[bytes]:
    """A run's file (a local path) opened for reading, checked against its folder's owner."""
    folder, name = _folder_of(os.fspath(path))
    return folder.open(name)


def check_file(path: str) -> None:
    """Check a local run file before a lazy scan opens it by name (UntrustedError if not)."""
    if not is_url(path):
        open_file(path).close()


def read_with(path: str | os.PathLike, reader: Callable[[IO[bytes]], Any]) -> Any:
    """``reader`` (``Snapshot.load``, ...) given a run's local file, opened and checked."""
    with open_file(path) as f:
        return reader(f)


def read_parquet(path: str | os.PathLike, **kw: Any) -> Any:
    """``pl.read_parquet`` of a run file: a URL as is, a local file through a checked descriptor."""
    import polars as pl

    p = os.fspath(path)
    if is_url(p):
        return pl.read_parquet(p, **kw)
    with open_file(p) as f:
        return pl.read_parquet(f, **kw)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, str]:
    import polars as pl

    p = os.fspath(path)
    if is_url(p):
        return pl.read_parquet_metadata(p)
    with open_file(p) as f:
        return pl.read_parquet_metadata(f)


def read_parquet_schema(path: str | os.PathLike) -> Any:
    import polars as pl

    p = os.fspath(path)
    if is_url(p):
        return pl.read_parquet_schema(p)
    with open_file(p) as f:
        return pl.read_parquet_schema(f)


def scan_parquet(paths: list[str], **kw: Any) -> Any:
    """``pl.scan_parquet`` of run files, each local one checked first (see the module's
    docstring for what is left between the check and polars' own open)."""
    import polars as pl

    for p in paths:
        check_file(p)
    return pl.scan_parquet(paths, **kw)
