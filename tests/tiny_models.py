"""Tiny randomly initialised BERT models built on the spot, for offline tests of model wiring,
and the card of a model `dapr train` stored."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]


def vocabulary(texts: Iterable[str]) -> list[str]:
    """BERT's special tokens, then every lowercased word and punctuation mark of ``texts``."""
    words = sorted({w for text in texts for w in re.findall(r"\w+|[^\w\s]", text.lower())})
    return SPECIAL + [w for w in words if w not in SPECIAL]


def tiny_bert(
    path: Path,
    texts: Iterable[str],
    head: str = "model",
    hidden: int = 32,
    seed: int = 0,
) -> Path:
    """Save a 2-layer BERT with a word-level vocabulary of ``texts`` under ``path``.

    ``head``: ``"model"`` (a bare BertModel), ``"mlm"`` (BertForMaskedLM) or ``"classifier"``
    (BertForSequenceClassification with one label, a cross-encoder).
    """
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertForSequenceClassification,
        BertModel,
        BertTokenizerFast,
    )

    torch.manual_seed(seed)
    path.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(texts)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(path)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
        num_labels=1,
    )
    model_class = {
        "model": BertModel,
        "mlm": BertForMaskedLM,
        "classifier": BertForSequenceClassification,
    }[head]
    model_class(config).save_pretrained(path)
    return path


def trained_card(name: str) -> dict:
    """The model card of ``trained/<name>`` as `dapr train` stored it."""
    pointer = Path(os.environ["DAPR_HOME"]) / "trained" / f"{name}.json"
    model = Path(json.loads(pointer.read_text())["path"])
    return json.loads((model / "dapr_training.json").read_text())
