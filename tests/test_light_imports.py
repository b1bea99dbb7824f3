"""A run whose steps are all cached loads no deep-learning library: validating an experiment
imports every retriever class it names, so those modules must not import torch themselves. BM25
loads none of the optional libraries that bm25s would import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _printed(code: str) -> str:
    """What ``code`` prints, run in a fresh Python (so its imports are its own)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_retriever_classes_load_without_torch():
    code = (
        "import sys\n"
        "import dapr.retrievers.bm25, dapr.retrievers.dense, dapr.retrievers.rerank\n"
        "import dapr.experiment.runner\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    assert _printed(code) == "[]"


@pytest.mark.skipif(
    any(Path(p).exists() for p in ("/proc/driver/nvidia/version", "/dev/kfd")),
    reason="a GPU driver is present: the plan's choice asks torch",
)
def test_a_dense_cache_key_is_made_without_torch_on_a_machine_without_a_gpu():
    """The batch plan (part of the key on a GPU) is chosen without loading torch where no GPU
    driver is present, so a run whose dense steps are cached never loads it."""
    code = (
        "import sys\n"
        "from dapr.retrievers.dense import Dense\n"
        "identity = Dense().identity()\n"
        "print('batching' in identity, 'torch' in sys.modules)\n"
    )
    assert _printed(code) == "False False"


def test_bm25_indexes_and_searches_without_the_libraries_bm25s_would_import():
    """bm25s imports jax (starting it on a GPU), numba and scipy when they are installed; BM25
    uses none of them, so they stay out (scoring given candidates loads no torch either), and
    one already imported is left in place."""
    code = (
        "import sys, tempfile\n"
        "from pathlib import Path\n"
        "from dapr.retrievers.bm25 import BM25\n"
        "bm25 = BM25()\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    bm25.index([('a', 'the cat sat'), ('b', 'dogs ran')], Path(folder) / 'index')\n"
        "    run = bm25.search({'q': 'cats'}, 10)\n"
        "    assert list(run.to_dict()['q']) == ['a']\n"
        "    assert bm25.score({'q': 'cats'}, run).to_dict() == run.to_dict()  # scoped\n"
        "heavy = ('jax', 'numba', 'scipy', 'torch')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert _printed(code) == "[]"
    pytest.importorskip("scipy")
    code = (
        "import sys, scipy\n"
        "from dapr.retrievers.bm25 import _import_bm25s\n"
        "bm25s = _import_bm25s()\n"
        "print(sys.modules['scipy'] is scipy, bm25s.SCIPY_AVAILABLE, bm25s.NUMBA_AVAILABLE)\n"
    )
    assert _printed(code) == "True False False"
