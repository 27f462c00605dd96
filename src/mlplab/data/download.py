"""Cache folder, checksums, downloads (temp file + atomic rename) and safe archive extraction."""
from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import Iterable

from ..errors import BadInput, RunFailure
from ..utils.progress import byte_bar

__all__ = ["DataError", "BadData", "ChecksumError", "cache_dir", "file_checksum", "verify_checksum", "fetch",
           "download_file", "safe_extract"]

_CHUNK = 1 << 20


class DataError(RunFailure):
    """A dataset file is missing, corrupt, truncated or unsafe. The message names the file."""


class BadData(BadInput, DataError):
    """The user's own data cannot be used as it is (an empty class folder, an image that does not
    decode, a damaged pack): bad input (exit 2). The message names the file and what to change."""


class ChecksumError(DataError):
    """A file's checksum differs from the published one."""


def cache_dir() -> Path:
    """``$MLPLAB_DATA`` if set, else ``~/.cache/mlplab/data``."""
    env = os.environ.get("MLPLAB_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mlplab" / "data"


def _split_checksum(checksum: str) -> tuple[str, str]:
    algo, sep, digest = checksum.partition(":")
    if not sep or algo not in ("md5", "sha256") or not digest:
        raise ValueError(f"checksum must be 'md5:<hex>' or 'sha256:<hex>', got {checksum!r}")
    return algo, digest.lower()


def file_checksum(path: str | os.PathLike, algo: str = "md5", *, decompress: bool = False) -> str:
    """Hex digest of a file (of its gzip-decompressed content if ``decompress``)."""
    h = hashlib.new(algo)
    opener = gzip.open if decompress else open
    try:
        with opener(path, "rb") as f:
            for block in iter(lambda: f.read(_CHUNK), b""):
                h.update(block)
    except (OSError, EOFError) as e:  # truncated gzip stream, bad gzip header
        raise DataError(f"{path}: cannot read ({e})") from e
    return h.hexdigest()


def verify_checksum(path: str | os.PathLike, checksum: str, content_checksum: str = "") -> None:
    """Raise ``ChecksumError`` naming ``path`` unless it matches ``checksum``.

    For ``.gz`` files a match of the decompressed bytes with ``content_checksum`` is accepted too
    (a re-compressed copy of the same data, e.g. Debian's package of Fashion-MNIST).
    """
    if not checksum and not content_checksum:
        return
    if checksum:
        algo, want = _split_checksum(checksum)
        got = file_checksum(path, algo)
        if got == want:
            return
    else:
        got, want = "-", "-"
    if content_checksum and str(path).endswith(".gz"):
        calgo, cwant = _split_checksum(content_checksum)
        if file_checksum(path, calgo, decompress=True) == cwant:
            return
    raise ChecksumError(f"{path}: checksum mismatch (expected {checksum or content_checksum}, got "
                        f"{got}); the file is corrupt or partial - delete it and download again")


def fetch(url: str, dest: str | os.PathLike, timeout: float = 60.0) -> None:
    """Copy ``url`` (https, http or file) to ``dest`` byte for byte. Tests monkeypatch this."""
    with urllib.request.urlopen(url, timeout=timeout) as r, open(dest, "wb") as f:  # noqa: S310
        size = r.headers.get("Content-Length") if hasattr(r, "headers") else None
        with byte_bar(int(size) if size and size.isdigit() else None, Path(url).name) as bar:  # rate, time left
            while chunk := r.read(_CHUNK):
                f.write(chunk)
                bar.update(len(chunk))


def download_file(urls: Iterable[str], dest: str | os.PathLike, checksum: str = "") -> Path:
    """Download to a temp file beside ``dest``, verify, then rename onto ``dest`` atomically.

    Mirrors in ``urls`` are tried in order; a mirror whose file fails the checksum is skipped.
    A partial or corrupt download never appears under ``dest``.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in urls:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        os.close(fd)
        try:
            fetch(url, tmp)
            verify_checksum(tmp, checksum)
            os.replace(tmp, dest)
            return dest
        except ChecksumError as e:
            errors.append(f"{url}: {e}")
        except (OSError, ValueError) as e:  # URLError is an OSError
            errors.append(f"{url}: {type(e).__name__}: {e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise DataError(f"could not download {dest.name}:\n  " + "\n  ".join(errors or ["no URL"]))


def _check_member(name: str, target: Path) -> Path:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or ".." in p.parts or (p.parts and ":" in p.parts[0]):
        raise DataError(f"unsafe archive member {name!r} (absolute path or '..'); refusing to extract")
    out = (target / Path(*p.parts)).resolve() if p.parts else target.resolve()
    if out != target.resolve() and target.resolve() not in out.parents:
        raise DataError(f"unsafe archive member {name!r} escapes {target}; refusing to extract")
    return out


def safe_extract(archive: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Extract a tar (any compression) or zip archive into ``target``, refusing unsafe members.

    Refused: absolute paths, ``..`` components, links whose target leaves ``target``, device
    files and fifos. All members are checked before anything is written.
    """
    archive, target = Path(archive), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member(info.filename, target)
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise DataError(f"{archive}: symlink member {info.filename!r}; refusing to extract")
            try:
                zf.extractall(target)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise DataError(f"{archive}: corrupt zip archive ({e})") from e
        return target
    try:
        tf = tarfile.open(archive)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: not a readable tar or zip archive ({e})") from e
    with tf:
        try:
            members = tf.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DataError(f"{archive}: corrupt or truncated tar archive ({e})") from e
        for m in members:
            out = _check_member(m.name, target)
            if m.issym() or m.islnk():
                link = PurePosixPath(m.linkname)
                base = out.parent if m.issym() else target.resolve()
                dest = (base / Path(*link.parts)).resolve() if not link.is_absolute() else Path(m.linkname)
                if link.is_absolute() or (dest != target.resolve() and target.resolve() not in dest.parents):
                    raise DataError(f"{archive}: link member {m.name!r} -> {m.linkname!r} points outside "
                                    f"{target}; refusing to extract")
            elif not (m.isfile() or m.isdir()):
                raise DataError(f"{archive}: special member {m.name!r} (device/fifo); refusing to extract")
        try:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(target, members=members, filter="data")
            else:  # pragma: no cover - python < 3.10.12
                tf.extractall(target, members=members)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DataError(f"{archive}: corrupt or truncated tar archive ({e})") from e
    return target
