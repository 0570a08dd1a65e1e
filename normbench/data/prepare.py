"""``normbench-data``: prepare every data set the presets read, where they read it.

    normbench-data                      # all four, into $NORMBENCH_DATA (see below)
    normbench-data cifar10-subset de-en-subset --root /data/normbench
    normbench-data iwslt14 --from ~/Downloads/iwslt14      # a copy you fetched yourself

- ``cifar10`` → ``cifar10/cifar-10-batches-py`` (full CIFAR presets, ``leaderboard``): torchvision's
  download, MD5-checked;
- ``cifar10-subset`` → ``cifar10-subset/cifar-10-batches-py`` (``*_cpu`` CIFAR presets,
  ``leaderboard_cpu``): from the original files, the first 1,000 / 200 of each class;
- ``de-en-subset`` → ``de-en-subset/{train,valid,test}.{de,en}`` (``*_cpu`` Transformer presets):
  Multi30k, the first 20,000 / 1,000 / 1,000 pairs;
- ``iwslt14`` → ``iwslt14.tokenized.de-en/…`` (full Transformer presets): IWSLT14 de-en, the text
  of fairseq's prepare-iwslt14.sh.

(`normbench.data.cifar_prepare` and `normbench.data.text_prepare` say exactly how each is made.)

Where: ``--root DIR``, else ``$NORMBENCH_DATA``, else where the presets look when it is unset:
``data/`` beside the checkout for ``cifar10`` and ``iwslt14``, ``../shared/data`` beside it for
the two subsets. Each data set is written into a temporary folder beside its target and renamed
when complete; an existing folder is left alone (``--force`` moves it aside to
``<name>.replaced-<time>``). Each prints its folder, counts, every file's size and SHA-256 (also
written as ``SHA256SUMS``). Without a network the first download fails at once, in one line that
says what to fetch by hand and where to put it; exit status 1, nothing half-written (so is a disk
that refuses a write). The user's own errors are one line and exit status 2, nothing written: an
unknown name or flag (with the valid ones, never argparse's usage block), ``--root`` naming a file,
``NORMBENCH_DATA`` set but empty (not taken as unset: the presets would read ``/<name>``), and a
file or folder given with ``--from`` that cannot be used (missing files, an archive cut short or
not gzip, text that is not UTF-8 or holds a line break inside a line, two languages of a split not
aligned, too few pairs), named in the line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from normbench.base.errors import ConfigError
from normbench.data import cifar_prepare, text_prepare
from normbench.data.cifar_files import BASE_FOLDER
from normbench.data.prepare_io import (
    BadSource,
    PrepareError,
    Report,
    TargetExists,
    describe,
    one_line,
    staged,
    write_checksums,
)
from normbench.data.roots import blank_data_env, blank_env_error, from_checkout

FOLDERS = {
    "cifar10": "cifar10",
    "cifar10-subset": "cifar10-subset",
    "de-en-subset": "de-en-subset",
    "iwslt14": "iwslt14.tokenized.de-en",
}
"""Name → folder under the data root, as the presets' ``dataset.root`` names it."""
UNSET_ROOT = {
    "cifar10": "data",
    "cifar10-subset": "../shared/data",
    "de-en-subset": "../shared/data",
    "iwslt14": "data",
}
"""Where the presets look with ``NORMBENCH_DATA`` unset (relative to the checkout)."""


def data_root(name: str, root: str | None) -> Path:
    """The folder that holds ``name``'s folder (see the module doc); `ConfigError` when
    ``$NORMBENCH_DATA`` is read and set but empty (the presets would read ``/<name>``)."""
    blank = None if root else blank_data_env()
    error = None if blank is None else blank_env_error(f"{blank}/{FOLDERS[name]}", f"{name} would go to {{root}}")
    if error is not None:
        raise error
    chosen = root or os.environ.get("NORMBENCH_DATA") or from_checkout(UNSET_ROOT[name])
    return Path(chosen).expanduser().absolute()


class UsageError(ConfigError):
    """A name or flag on the command line that cannot work: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with an error as one `UsageError` line naming the valid flags, not its usage block."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            flags = [f for a in self._actions for f in a.option_strings if f.startswith("--")]
            message += f"; valid flags: {', '.join(flags)}"
        raise UsageError(f"{message} (see normbench-data --help)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; `UsageError` (one line) on an unknown name or flag, ``--from`` with
    several names, ``--root`` naming a file."""
    parser = _Parser(
        prog="normbench-data",
        description="Prepare the data sets the presets read (CIFAR-10, its CPU subset, the Multi30k subset, IWSLT14).",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"what to prepare: {', '.join(FOLDERS)} or all (default)"
    )
    parser.add_argument("--root", help="the data folder (default: $NORMBENCH_DATA, else where the presets look)")
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="make one data set from files you fetched yourself instead of downloading",
    )
    parser.add_argument("--force", action="store_true", help="move an existing folder aside and prepare it anew")
    parser.add_argument("--hub", default=text_prepare.IWSLT_HUB, help="iwslt14: the Hub data set (default %(default)s)")
    parser.add_argument("--hub-revision", default=text_prepare.IWSLT_REVISION, help="iwslt14: its revision")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FOLDERS and n != "all"]
    if unknown:
        parser.error(f"unknown data set {', '.join(map(repr, unknown))}; valid names: {', '.join(FOLDERS)}, all")
    args.names = list(FOLDERS) if not args.names or "all" in args.names else list(dict.fromkeys(args.names))
    if args.source is not None and len(args.names) != 1:
        parser.error("--from makes one data set: name it (e.g. normbench-data iwslt14 --from DIR)")
    if args.root is not None and (not args.root.strip() or Path(args.root).expanduser().is_file()):
        what = "is empty" if not args.root.strip() else "is a file"
        parser.error(f"--root {args.root!r} {what}; pass the folder that holds (or will hold) the data sets")
    return args


def builder(name: str, args: argparse.Namespace, target: Path) -> Callable[[Path], Report]:
    """A function of the staging folder that writes ``name`` into it."""
    if name == "cifar10":
        return lambda tmp: cifar_prepare.prepare_cifar10(tmp, args.source, target)
    if name == "cifar10-subset":
        home = data_root("cifar10", args.root) / FOLDERS["cifar10"]  # where a prepared release is looked for
        release: Path | None = home / BASE_FOLDER
        if args.source is None and release.is_dir():
            cifar_prepare.check_release(release)
            print(f"cifar10-subset: made from {release}")
        else:
            release = None
        return lambda tmp: cifar_prepare.prepare_subset(tmp, args.source, release, target, home)
    if name == "de-en-subset":
        return lambda tmp: text_prepare.prepare_multi30k(tmp, args.source, target)
    return lambda tmp: text_prepare.prepare_iwslt14(tmp, args.source, target, args.hub, args.hub_revision)


def prepare_one(name: str, args: argparse.Namespace) -> None:
    """Prepare ``name`` (or say why it was left alone); `PrepareError` when it cannot be made."""
    target = data_root(name, args.root) / FOLDERS[name]
    try:
        with staged(target, args.force) as tmp:
            make = builder(name, args, target)
            report = make(tmp)
            report.files = write_checksums(tmp)
    except TargetExists as e:
        print(f"{name}: {e}")
        return
    except ConfigError as e:  # a bad input file, named by normbench.data's readers
        raise BadSource(str(e)) from None
    except PrepareError as e:  # with --from, whatever is wrong is the source the user gave
        if args.source is None or isinstance(e, BadSource):
            raise
        raise BadSource(str(e)) from None
    except OSError as e:  # a read-only or full disk, a file that cannot be written
        raise PrepareError(f"{one_line(e)} while writing {target}; nothing was left there") from None
    print("\n".join(describe(report, target)))


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0; 2 for the user's errors (`UsageError`, `BadSource`, an empty
    ``NORMBENCH_DATA``), 1 when a download or a write failed; one line on stderr either way."""
    try:
        args = parse_args(argv)
        roots = sorted({str(data_root(n, args.root)) for n in args.names})  # NORMBENCH_DATA='': before any work
    except ConfigError as e:
        print(f"normbench-data: {e}", file=sys.stderr)
        return 2
    for name in args.names:
        try:
            prepare_one(name, args)
        except PrepareError as e:
            print(f"normbench-data {name}: {e}", file=sys.stderr)
            return 2 if isinstance(e, BadSource) else 1
    if args.root or os.environ.get("NORMBENCH_DATA"):
        print(f"the presets read it with: export NORMBENCH_DATA={roots[0]}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
