"""What `normbench-data` does around every data set: write into a folder that appears whole or not
at all, check the network before a download, and report what was written.

- `staged`: the data set is written into ``.<name>.partial-<pid>`` beside the target and renamed
  to the target only when complete; on any error that folder (made here) is removed, so nothing
  half-written is left. An existing target is never deleted: without ``force`` it is left alone
  (`TargetExists`), with ``force`` it is renamed aside to ``<name>.replaced-<time>`` after the new
  folder is complete. Folders made for the target are removed again when it fails.
- `require_network`: a short TCP connect to the host a download needs (5 s), so that a machine
  without a network fails at once, in one line that says what to fetch by hand and where to put
  it (`PrepareError`), instead of hanging in a download. Skipped behind a proxy (``HTTPS_PROXY``),
  where a direct connect says nothing; the download's own first error is reported in the same way.
- `describe`: every file written, with its size and SHA-256 (and MD5 where the source publishes
  MD5s), as printed lines and as ``SHA256SUMS`` in the folder.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import socket
import tarfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

CONNECT_TIMEOUT_S = 5.0
CHECKSUMS_FILE = "SHA256SUMS"


class PrepareError(Exception):
    """A data set could not be prepared; the message is one line for the user (what to do)."""


class BadSource(PrepareError):
    """A file the data set is made from (``--from``) that cannot be used as it is: an archive cut
    short or not gzip, text that is not UTF-8, two languages of a split not aligned. The message
    names the file; exit status 2 (the user's input), where a failed download is 1."""


class TargetExists(Exception):
    """The target folder exists already and was left alone."""


@dataclass
class Report:
    """What one data set's preparation wrote: its folder, per-split counts and notes."""

    name: str
    folder: Path
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path) -> list[str]:
    """``SHA256SUMS`` (``sha256sum -c`` format) over every file under ``folder``; its lines."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS_FILE)
    lines = [f"{sha256(p)}  {p.relative_to(folder).as_posix()}" for p in files]
    (folder / CHECKSUMS_FILE).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines


def describe(report: Report, final: Path) -> list[str]:
    """The printed lines for a prepared data set (``final``: where its folder now is)."""
    counts = ", ".join(f"{k} {v:,}" for k, v in report.counts.items())
    out = [f"{report.name}: wrote {final}" + (f" ({counts})" if counts else "")]
    out += [f"  {line}" for line in report.notes]
    for line in report.files:
        digest, rel = line.split("  ", 1)
        size = (final / rel).stat().st_size
        out.append(f"  {rel}  {size:,} bytes  sha256 {digest}")
    out.append(f"  checksums: {final / CHECKSUMS_FILE} (sha256sum -c)")
    return out


@contextlib.contextmanager
def staged(target: Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty folder beside ``target``; on success it becomes ``target`` (see the module doc)."""
    target = target.expanduser().absolute()
    if target.exists() and not force:
        raise TargetExists(f"{target} exists; left alone (pass --force to move it aside and prepare it anew)")
    made = [p for p in (target.parent, *target.parent.parents) if not p.exists()]  # folders made here
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    if tmp.exists():  # a crashed earlier run of this very process id: ours, never the user's
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            aside = target.with_name(f"{target.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
            target.rename(aside)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:  # innermost first; only while empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def extract_archive(archive: Path, into: Path, wanted: Callable[[tarfile.TarInfo], bool] | None = None) -> None:
    """The files of the ``.tar.gz`` ``archive`` (those ``wanted`` when given) extracted into
    ``into``; links and paths out of ``into`` refused (tarfile's ``data`` filter). An archive cut
    short, not gzip or not tar is one `BadSource` line naming it."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = [m for m in tar.getmembers() if wanted is None or wanted(m)]
            if not members:
                return
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12
                tar.extractall(into, members=members, filter="data")
            else:  # pragma: no cover
                tar.extractall(into, members=members)  # noqa: S202
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise BadSource(f"{archive} is not a whole .tar.gz archive ({one_line(e)}); fetch it again") from None


def _behind_proxy() -> bool:
    return any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))


def require_network(url: str, by_hand: str) -> None:
    """Raise `PrepareError` at once when ``url``'s host cannot be reached (or the Hub is set offline).

    ``by_hand`` says what to fetch and where to put it; it ends the one-line message."""
    host = urlparse(url).hostname or url
    port = urlparse(url).port or (80 if url.startswith("http://") else 443)
    if "huggingface.co" in host and os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise PrepareError(f"HF_HUB_OFFLINE is set, so {host} is not asked; {by_hand}")
    if _behind_proxy():
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise PrepareError(f"no network: cannot reach {host}:{port} ({one_line(e)}); {by_hand}") from None


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


@contextlib.contextmanager
def download_errors(by_hand: str, timeout_s: float = 60.0) -> Iterator[None]:
    """Any error inside (a refused connection, a stalled socket, a bad archive) as one `PrepareError`
    line; sockets opened inside time out after ``timeout_s`` instead of hanging."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        yield
    except (PrepareError, KeyboardInterrupt):
        raise
    except Exception as e:
        raise PrepareError(f"download failed ({one_line(e)}); {by_hand}") from None
    finally:
        socket.setdefaulttimeout(previous)
