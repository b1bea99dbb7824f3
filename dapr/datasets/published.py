"""The DAPR benchmark as published on the Hugging Face hub (``UKPLab/dapr``), fetched once.

The hub dataset holds one config per table: ``<Name>-corpus``, ``<Name>-queries``,
``<Name>-qrels`` and, where present, ``<Name>-docs``, ``<Name>-keyphrases`` and
``<Name>-corpus_coref``. Its dataset card lists each config's parquet files per split. A fetch
downloads the card, then only the files of the configs of one dataset, and arranges them as a
dataset directory in the hub layout that :func:`dapr.datasets.read_dataset` reads::

    corpus/0000.parquet ...   queries/{split}.parquet   qrels/{split}.parquet
    docs/ keyphrases/ corpus_coref/   (the optional configs, as published)

Downloads go through ``huggingface_hub`` (resumable, checked against the hub's hashes). Without
hub access, a copy of the repository made elsewhere works just as well (``snapshot``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from dapr.datasets.hub import hub_file
from dapr.errors import DaprError, DataError
from dapr.io.files import atomic_directory
from dapr.paths import home

REPO = "UKPLab/dapr"
CARD = "README.md"
TABLES = ("corpus", "queries", "qrels")
EXTRAS = ("docs", "keyphrases", "corpus_coref")


def fetch_published(name: str, out: Path, repo: str = REPO, snapshot: Path | None = None) -> Path:
    """Write dataset ``name`` of the hub dataset ``repo`` to ``out`` in the hub layout."""
    files = {
        table: config_files(f"{name}-{table}", repo, snapshot, table in EXTRAS, name)
        for table in (*TABLES, *EXTRAS)
    }
    with atomic_directory(Path(out), owned=lambda p: hub_file(p, EXTRAS)) as root:
        for n, path in enumerate(sorted(p for ps in files["corpus"].values() for p in ps)):
            _copy(path, root / "corpus" / f"{n:04d}.parquet")
        for table in ("queries", "qrels"):
            for split, paths in files[table].items():
                if len(paths) != 1:
                    raise DataError(
                        f"{repo}: config {name}-{table} split {split!r} has {len(paths)} files; "
                        "expected one parquet file per split"
                    )
                _copy(paths[0], root / table / f"{split}.parquet")
        for table in EXTRAS:
            for split, paths in files[table].items():
                for n, path in enumerate(sorted(paths)):
                    _copy(path, root / table / f"{split}-{n:04d}.parquet")
    return Path(out)


def config_files(
    config: str,
    repo: str = REPO,
    snapshot: Path | None = None,
    optional: bool = False,
    dataset: str = "NAME",
) -> dict[str, list[Path]]:
    """The local parquet files of one config, by split, downloaded unless ``snapshot`` is given.

    An ``optional`` config that the card does not list gives ``{}``. ``dataset`` names the
    dataset in the fix that an error suggests.
    """
    root = Path(snapshot) if snapshot is not None else _download([CARD], repo, dataset)
    card = root / CARD
    configs = read_card(card)
    if config not in configs:
        if optional:
            return {}
        have = ", ".join(sorted(configs)) or "none"
        raise DataError(f"{card}: the dataset card lists no config {config!r}; it has: {have}")
    patterns = configs[config]
    if snapshot is None:
        _download([p for ps in patterns.values() for p in ps], repo, dataset)
    found = {}
    for split, split_patterns in patterns.items():
        paths = sorted({p for pattern in split_patterns for p in root.glob(pattern)})
        if not paths:
            raise DataError(
                f"{root}: no file matches {', '.join(split_patterns)} (config {config!r}, split "
                f"{split!r}); download the whole repository {repo} again"
            )
        found[split] = paths
    return found


def read_card(card: Path) -> dict[str, dict[str, list[str]]]:
    """Config name -> split -> file patterns, from the YAML header of a dataset card."""
    if not card.is_file():
        raise DataError(f"{card}: missing dataset card; download the whole repository again")
    text = card.read_text(encoding="utf-8")
    parts = text.split("---", 2)
    if not text.startswith("---") or len(parts) < 3:
        raise DataError(f"{card}: no YAML header between '---' lines; is this a dataset card?")
    try:
        header = yaml.safe_load(parts[1]) or {}
    except yaml.YAMLError as e:
        problem = " ".join(str(e).split())
        raise DataError(
            f"{card}: the YAML header does not parse ({problem}); re-download it"
        ) from None
    configs = {}
    for entry in header.get("configs") or []:
        if isinstance(entry, dict) and "config_name" in entry:
            configs[str(entry["config_name"])] = _split_patterns(entry.get("data_files"), card)
    return configs


def _split_patterns(data_files: object, card: Path) -> dict[str, list[str]]:
    """``data_files`` in any of the card's forms -> split -> patterns (a bare one is train)."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, list):
        out: dict[str, list[str]] = {}
        for item in data_files:
            if isinstance(item, str):
                out.setdefault("train", []).append(item)
            elif isinstance(item, dict) and "split" in item and "path" in item:
                paths = item["path"]
                out.setdefault(str(item["split"]), []).extend(
                    [paths] if isinstance(paths, str) else list(paths)
                )
            else:
                raise DataError(f"{card}: data_files entry {item!r} has no split and path")
        return out
    raise DataError(f"{card}: data_files {data_files!r} is neither a path nor a list")


def _download(patterns: list[str], repo: str, dataset: str) -> Path:
    """Files matching ``patterns`` from the hub into dapr's local copy of ``repo``."""
    local = home() / "hub" / repo.replace("/", "__")
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo, repo_type="dataset", allow_patterns=patterns, local_dir=local)
    except ImportError:
        raise DaprError(
            'downloading from the hub needs huggingface_hub: pip install "dapr-ir[data]"'
        ) from None
    except Exception as e:  # offline, unknown repo, HTTP errors: all end the same way
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise DaprError(
            f"dataset {dataset!r} is not in {home() / 'datasets' / dataset} and the hub dataset "
            f"{repo} cannot be reached ({reason}); where the hub is reachable run "
            f"`huggingface-cli download {repo} --repo-type dataset --local-dir DIR`, copy DIR "
            f"here and run `dapr data fetch {dataset} --from DIR`, or build it from raw files "
            f"with `dapr data build {dataset} --source DIR`"
        ) from None
    return local


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
