"""Dense retrieval with sentence-transformers: exact top-k over on-disk embeddings."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from dapr.data import Run
from dapr.models import sentence_transformer

_ENCODE_CHUNK = 1024
"""Items encoded (and written to one part file) between two progress updates."""


class Dense:
    """A bi-encoder: one ``model`` for both sides, or a ``query_model`` and a ``document_model``
    (DRAGON+ style). Pooling and similarity are the model's own unless overridden.

    Embeddings are written to the index store in chunks, and search scores the corpus block by
    block, so memory stays bounded by ``block_size`` whatever the corpus size.
    """

    version = "1"

    def __init__(
        self,
        model: str = "sentence-transformers/all-MiniLM-L6-v2",
        query_model: str | None = None,
        document_model: str | None = None,
        pooling: str | None = None,
        similarity: str | None = None,
        batch_size: int = 64,
        block_size: int = 65536,
        device: str | None = None,
    ):
        self.query_name = query_model or model
        self.document_name = document_model or model
        self.pooling = pooling
        self.similarity = similarity
        self.batch_size = batch_size
        self.block_size = block_size
        self.device = device
        self._models: dict[str, object] = {}
        self._embeddings: np.ndarray | None = None
        self._ids: np.ndarray | None = None

    def _model(self, name: str):
        if name not in self._models:
            self._models[name] = sentence_transformer(
                name, self.pooling, self.similarity, self.device
            )
        return self._models[name]

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        encoder = self._model(self.document_name)
        store.mkdir(parents=True, exist_ok=True)
        ids: list[str] = []
        parts = []
        progress = tqdm(desc=f"encoding with {self.document_name}", unit=" items", delay=1)
        for n, chunk in enumerate(_chunks(items, _ENCODE_CHUNK)):
            ids.extend(item_id for item_id, _ in chunk)
            vectors = encoder.encode_document(
                [text for _, text in chunk], batch_size=self.batch_size, convert_to_numpy=True
            )
            part = store / f"part-{n:05d}.npy"
            np.save(part, vectors.astype(np.float32))
            parts.append(part)
            progress.update(len(chunk))
        progress.close()
        dim = encoder.get_sentence_embedding_dimension()
        matrix = np.lib.format.open_memmap(
            store / "embeddings.npy", mode="w+", dtype=np.float32, shape=(len(ids), dim)
        )
        start = 0
        for part in parts:
            block = np.load(part)
            matrix[start : start + len(block)] = block
            start += len(block)
            part.unlink()
        matrix.flush()
        del matrix
        (store / "ids.json").write_text(json.dumps(ids))
        self.load(store)

    def load(self, store: Path) -> None:
        self._embeddings = np.load(store / "embeddings.npy", mmap_mode="r")
        self._ids = np.array(json.loads((store / "ids.json").read_text()), dtype=object)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        import torch

        if self._embeddings is None or self._ids is None:
            raise RuntimeError("Dense.search called before index() or load()")
        qids = list(queries)
        encoder = self._model(self.query_name)
        q = encoder.encode_query(
            [queries[i] for i in qids],
            batch_size=self.batch_size,
            convert_to_tensor=True,
            show_progress_bar=len(qids) > 1000,
        )
        q = q.float().cpu()
        depth = min(k, len(self._ids))
        best_scores = torch.full((len(qids), 0), float("-inf"))
        best_items = torch.zeros((len(qids), 0), dtype=torch.long)
        for start in range(0, len(self._ids), self.block_size):
            block = torch.from_numpy(np.array(self._embeddings[start : start + self.block_size]))
            scores = encoder.similarity(q, block).float()
            top = torch.topk(scores, min(depth, scores.shape[1]), dim=1)
            best_scores = torch.cat([best_scores, top.values], dim=1)
            best_items = torch.cat([best_items, top.indices + start], dim=1)
            keep = torch.topk(best_scores, min(depth, best_scores.shape[1]), dim=1)
            best_scores = keep.values
            best_items = torch.gather(best_items, 1, keep.indices)
        return Run.from_lists(
            qids, list(best_items.numpy()), list(best_scores.double().numpy()), self._ids
        )


def _chunks(items: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
