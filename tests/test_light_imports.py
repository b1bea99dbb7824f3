"""A run whose steps are all cached loads no deep-learning library: validating an experiment
imports every retriever class it names, so those modules must not import torch themselves."""

from __future__ import annotations

import subprocess
import sys


def test_retriever_classes_load_without_torch():
    code = (
        "import sys\n"
        "import dapr.retrievers.bm25, dapr.retrievers.dense, dapr.retrievers.rerank\n"
        "import dapr.experiment.runner\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
