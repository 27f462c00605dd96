"""Files that survive a kill, a full disk and a second writer.

* :func:`atomic_save` writes a temp file in the target's folder, fsyncs it and renames it over the
  target: a crash leaves the old file or the new one, never a partial one. The file gets the
  permissions any other tool would give it (``0666 & ~umask``; ``mkstemp`` alone makes ``0600``,
  which teammates on a shared cluster cannot read). A failed write names the target, not the
  hidden temp file, and a library's own write error (safetensors, ``torch.save``) caused by a full
  disk or a file-size limit comes back as the ``OSError`` it is.
* :func:`read_json` reads a JSON file the tool wrote, or says which file is unreadable and why.
* :func:`folder_lock` holds a folder's ``.lock`` (``fcntl.flock``) so one process writes at a time;
  the kernel drops it when the holder dies, so a killed process never leaves a stale lock.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import BadInput, FolderInUse, UnreadableFile

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_save", "read_json",
           "folder_lock", "claimed_folder", "command_line", "file_mode", "torch_load", "torch_load_error", "LOCK_FILE"]

LOCK_FILE = ".lock"
_HELD: set[str] = set()  # folders whose lock this process holds


def file_mode() -> int:
    """The mode a new file gets from ``open()``: ``0o666`` less the process umask."""
    try:
        with open("/proc/self/status") as f:  # Linux >= 4.7: reads the umask without changing it
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_OS_ERROR = re.compile(r"os error (\d+)")


def _write_error(e: BaseException, tmp: str) -> OSError | None:
    """The ``OSError`` behind a writer's non-``OSError`` failure, if the disk is the cause:
    safetensors says ``(os error 28)``; ``torch.save`` only says its position is wrong, so a short
    probe write to the temp file tells whether the file system refuses more bytes."""
    m = _OS_ERROR.search(str(e))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code))
    try:
        with open(tmp, "ab") as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    except OSError as probe:
        return probe
    return None


def atomic_save(path: str | os.PathLike, writer: Callable[[str], None]) -> Path:
    """Call ``writer(tmp_path)`` and move the finished file onto ``path`` in one rename.

    A crash at any point leaves either the old file or the new one, never a partial file. The
    folder must exist or be creatable; an ``OSError`` names ``path``."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            writer(tmp)
        except OSError:
            raise
        except Exception as e:
            cause = _write_error(e, tmp)
            if cause is None:
                raise
            raise cause from e
        os.chmod(tmp, file_mode())  # after the writer: some writers replace the file they are given
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if e.filename in (None, tmp):  # name the file the caller asked for, not the hidden temp file
            raise type(e)(e.errno, e.strerror or str(e), str(path)) from e
        raise
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def _w(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return atomic_save(path, _w)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike, what: str = "file", expect: type | None = dict,
              users: bool = False, fix: str | None = None) -> Any:
    """The JSON in ``path``; a missing file raises ``FileNotFoundError``, and an empty, cut,
    non-UTF-8 or wrongly shaped one :class:`~mlplab.errors.UnreadableFile` naming the file
    (``users``: a file the user wrote, so :class:`~mlplab.errors.BadInput` saying to fix it;
    ``fix``: what to do instead of removing or restoring the file)."""
    path = Path(path)
    if users:
        try:
            return read_json(path, what, expect)
        except UnreadableFile as e:
            raise BadInput(f"{what} {path} {e.reason}; fix it") from None
    extra = (fix,) if fix else ()
    data = path.read_bytes()
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UnreadableFile(path, f"is not UTF-8 text (byte {e.start})", what, *extra) from None
    except json.JSONDecodeError as e:
        reason = "is empty" if not data.strip() else f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise UnreadableFile(path, reason, what, *extra) from None
    if expect is not None and not isinstance(obj, expect):
        raise UnreadableFile(path, f"holds a JSON {type(obj).__name__}, not an object", what, *extra)
    return obj


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GLOBAL = re.compile(r"GLOBAL (\S+) was not an allowed global")


def torch_load(path: str | os.PathLike) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)``: no code in the file runs, and
    the warnings torch prints on its way to refusing a file (a pickle protocol it did not expect)
    are not shown; the caller's error says what is wrong (:func:`torch_load_error`)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


def torch_load_error(e: BaseException) -> str:
    """What went wrong in ``torch.load(weights_only=True)``, in a few words: a cut or corrupt
    archive, or the object the weights-only unpickler refused (without torch's advice to load
    with ``weights_only=False``, which would run the file's code)."""
    text = _ANSI.sub("", str(e))
    if "WeightsUnpickler error:" in text:
        reason = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0].strip()
        if reason.startswith("Unsupported global"):  # torch's advice to allow-list it would run the file's code
            found = _GLOBAL.search(reason)
            return ("it holds objects other than tensors and plain types "
                    f"(a pickled {found.group(1) if found else 'object'})")
        return "it is cut short or not a PyTorch file"
    if "Weights only load failed" in text:
        return "it is not a PyTorch file of tensors and plain types"
    if isinstance(e, (EOFError, OSError)) or "zip archive" in text or "central directory" in text:
        return "it is cut short or not a PyTorch file"
    return f"{type(e).__name__}: {text.strip().splitlines()[0] if text.strip() else ''}"


def command_line() -> str:
    """This process's command as a person typed it (``mlplab pack A B``; ``python -m mlplab.cli``
    reads as ``mlplab``), cut to 500 characters: what a refused second writer is told."""
    argv = list(sys.argv) or ["python"]
    prog = os.path.basename(argv[0])
    _, inside, module = argv[0].rpartition(f"{os.sep}mlplab{os.sep}")
    if inside and module.endswith(".py"):  # python -m mlplab.cli / mlplab.experiments.worker
        module = "mlplab." + module[:-3].replace(os.sep, ".")
        prog = "mlplab" if module == "mlplab.cli" else f"python -m {module}"
    text = " ".join([prog, *(shlex.quote(a) for a in argv[1:])])
    return text if len(text) <= 500 else text[:497] + "..."


def _holder(fd: int) -> str:
    """Who holds a lock, from its file: ``process PID (COMMAND)``; an older holder wrote its PID only."""
    pid, _, command = os.pread(fd, 4096, 0).decode(errors="replace").strip().partition("\n")
    if not pid.strip():
        return "another process"
    return f"process {pid.strip()}" + (f" ({command.strip()})" if command.strip() else "")


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, hint: str = "wait for it to finish (or stop it)") -> Iterator[Path]:
    """Hold ``<folder>/.lock`` exclusively, or raise :class:`~mlplab.errors.FolderInUse` naming
    the holder (its PID and command). The holder writes both into the file; the kernel releases
    the lock when the process ends, however it ends. Re-entrant within a process (``reproduce``
    holds its output folder while each stage's sweep takes it again). An ``OSError`` (a full
    disk, a read-only folder) names the lock file."""
    folder = Path(folder)
    key = os.path.realpath(folder)
    if key in _HELD:
        yield folder
        return
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise FolderInUse(f"{folder} is in use by {_holder(fd)}; {hint}") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{command_line()}\n".encode(), 0)
        except OSError as e:  # a full disk: the lock is held, but the file cannot say by whom
            raise type(e)(e.errno, e.strerror, str(path)) from None
        _HELD.add(key)
        try:
            yield folder
        finally:
            _HELD.discard(key)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def claimed_folder(folder: str | os.PathLike, hint: str = "wait for it to finish (or stop it)") -> Iterator[Path]:
    """``folder`` made if missing (with its parents) and held (:func:`folder_lock`) for the body.
    When the body fails, what this call made and nothing else filled is removed again: the lock
    file, and the folder and the parents it created once they are empty (a refusal, or a write
    that failed before the first file). A refused command leaves nothing behind."""
    folder = Path(folder)
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # innermost first
    lock = folder / LOCK_FILE
    had_lock = lock.exists()
    folder.mkdir(parents=True, exist_ok=True)
    held = False
    try:
        with folder_lock(folder, hint):
            held = True
            yield folder
    except BaseException as e:
        if not had_lock and (held or not isinstance(e, FolderInUse)):  # another's lock file stays
            lock.unlink(missing_ok=True)
        _remove_empty(made)
        raise


def _remove_empty(folders: list[Path]) -> None:
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            return
