"""``dapr cache``: list and prune the content-addressed cache (:mod:`dapr.store`)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.errors import DaprError

if TYPE_CHECKING:
    from dapr.data import Corpus
    from dapr.store.housekeeping import Entry


def add(commands: argparse._SubParsersAction) -> None:
    cache = commands.add_parser("cache", help="list or prune the cache ($DAPR_HOME/cache)")
    actions = cache.add_subparsers(required=True, metavar="ACTION")
    listing = actions.add_parser("ls", help="entries per kind and their size")
    listing.add_argument("--all", action="store_true", help="one line per entry")
    listing.set_defaults(handler=_ls)
    check = actions.add_parser(
        "verify",
        help="check every entry against the checksums recorded when it was written, and "
        "every prepared dataset's corpus record against its corpus",
        description="Reads every file of every complete entry and compares its size and "
        "checksum with those recorded when the entry was written. Damaged entries are moved "
        "to $DAPR_HOME/cache/.quarantine (a run computes them again). Then reads the corpus of "
        "every dataset that has a corpus record (the fingerprint and ids a full read keeps, in "
        "$DAPR_HOME/datasets, for the next process) and compares: a record whose files look "
        "unchanged but disagree with it is removed (the next read writes it again). Exit "
        "status 2 when a record disagreed, else 1 when an entry was damaged.",
    )
    check.add_argument("--kind", action="append", help="only these kinds (indexes, runs)")
    check.add_argument(
        "--dataset",
        action="append",
        metavar="NAME_OR_DIR",
        help="only the corpus record of this dataset (a registered name or a dataset "
        "directory, also outside $DAPR_HOME); with --kind, those entries too",
    )
    check.set_defaults(handler=_verify)
    prune = actions.add_parser(
        "prune",
        help="remove entries not used for a while, and what killed runs left behind",
        description="Removes complete entries unused for --older-than DAYS (or every entry with "
        "--everything), always with the temporary files of killed runs and incomplete entries, "
        "and the corpus records of dataset directories that are gone. "
        "An entry a running experiment holds is waited for, never removed under it. What is "
        "not an entry dapr wrote (results put in the cache, another program's files) is listed "
        "and left alone.",
    )
    when = prune.add_mutually_exclusive_group(required=True)
    when.add_argument("--older-than", type=float, metavar="DAYS")
    when.add_argument("--everything", action="store_true")
    prune.add_argument("--kind", action="append", help="only these kinds (indexes, runs, contexts)")
    prune.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    prune.set_defaults(handler=_prune)


def _ls(args: argparse.Namespace) -> int:
    from dapr.store.cache import Cache
    from dapr.store.housekeeping import entries, human_size, summary

    cache = Cache()
    found = entries(cache)
    print(f"{cache.root}\n")
    print(summary(found))
    if args.all:
        for entry in found:
            print(f"{entry.kind:<9} {entry.key}  {human_size(entry.bytes):>9}  {entry.state}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from dapr.datasets.record import records
    from dapr.store.cache import Cache
    from dapr.store.housekeeping import verify

    datasets = [_dataset_dir(d) for d in args.dataset] if args.dataset else None
    damaged: list[Entry] = []
    if args.kind or datasets is None:
        cache = Cache()
        checked, damaged = verify(cache, args.kind)
        for entry in damaged:
            print(f"  damaged  {entry.kind}/{entry.key}: {entry.damage}; moved to quarantine")
        print(f"{checked} entries verified, {len(damaged)} damaged, in {cache.root}")
    mismatched = 0
    if datasets is not None or not args.kind:
        mismatched = _verify_records(datasets if datasets is not None else records())
    return 2 if mismatched else 1 if damaged else 0


def _dataset_dir(name: str) -> Path:
    """The directory of a dataset given by registered name or path."""
    from dapr.datasets.adapter import Adapter
    from dapr.registry import datasets

    if name in datasets:
        found = datasets.get(name)
        if isinstance(found, Adapter):
            return found.prepared
        raise DaprError(f"--dataset {name}: is read by a function, not from a directory")
    if Path(name).is_dir():
        return Path(name)
    raise DaprError(
        f"--dataset {name}: not a registered dataset nor a dataset directory; give a name "
        "from `dapr data list` or a directory"
    )


def _corpus(folder: Path) -> Corpus:
    """The corpus of a dataset directory, read as if it had no record."""
    from dapr.datasets import read_dataset

    return read_dataset(folder, remember=False).corpus


def _verify_records(folders: list[Path]) -> int:
    """Check the corpus record of each dataset directory; how many disagreed."""
    from dapr.datasets.record import audit

    checked, mismatched = 0, 0
    for folder in folders:
        status, why = audit(folder, partial(_corpus, folder))
        if status == "none":
            print(f"  none     {folder}: {why}")
            continue
        checked += status != "outdated"
        if status == "outdated":
            print(f"  outdated {folder}: {why}; record removed (the next read writes it)")
        elif status == "mismatch":
            mismatched += 1
            print(f"  mismatch {folder}: {why}; record removed (the next read writes it)")
    print(f"{checked} corpus records verified, {mismatched} disagreed with their corpus")
    return mismatched


def _prune(args: argparse.Namespace) -> int:
    from dapr.store.cache import Cache
    from dapr.store.housekeeping import foreign, human_size, prune

    if args.older_than is not None and args.older_than < 0:
        raise DaprError(f"--older-than must be a number of days >= 0, got {args.older_than}")
    older = None if args.everything else timedelta(days=args.older_than)
    removed = prune(Cache(), older_than=older, kinds=args.kind, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for entry in removed:
        print(f"  {entry.kind:<9} {entry.key}  {human_size(entry.bytes)}  {entry.state}")
    total = human_size(sum(entry.bytes for entry in removed))
    print(f"{verb} {len(removed)} entries, {total}")
    _prune_records(verb, args.dry_run)
    cache = Cache()
    strange = foreign(cache)
    for path in strange:
        print(f"  left      {path.relative_to(cache.root)}  (not an entry dapr wrote)")
    if strange:
        print(f"left {len(strange)} paths under {cache.root} that dapr did not write")
    return 0


def _prune_records(verb: str, dry_run: bool) -> None:
    """Remove (or with ``dry_run`` list) the corpus records whose dataset directory is gone."""
    from dapr.datasets.record import orphans, remove_orphan
    from dapr.store.housekeeping import human_size

    gone = [orphan for orphan in orphans() if dry_run or remove_orphan(orphan)]
    for orphan in gone:
        print(f"  record    {orphan.root}  {human_size(orphan.bytes)}  its dataset is gone")
    if gone:
        total = human_size(sum(orphan.bytes for orphan in gone))
        print(f"{verb} {len(gone)} corpus records of datasets that are gone, {total}")
