"""Tiny randomly initialised fastcoref checkpoints (F-coref or LingMess heads on a 2-layer BERT)
built on the spot, for offline tests of the coref contextualizer's model wiring."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tiny_models import vocabulary


def tiny_fastcoref(
    path: Path, texts: Iterable[str], kind: str = "fcoref", segment: int = 16, seed: int = 0
) -> Path:
    """Save a loadable F-coref (``kind="fcoref"``) or LingMess (``"lingmess"``) checkpoint
    under ``path``: a BertConfig with fastcoref's ``coref_head`` settings, the model's weights
    and a word-level BERT tokenizer over the words of ``texts``. ``segment`` is the model's
    ``max_segment_len`` (F-coref encodes long inputs in segments of that many sub-words)."""
    import torch
    from fastcoref.coref_models.modeling_fcoref import FCorefModel
    from fastcoref.coref_models.modeling_lingmess import LingMessModel
    from transformers import BertConfig, BertTokenizerFast

    torch.manual_seed(seed)
    path.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(texts)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    model_class = {"fcoref": FCorefModel, "lingmess": LingMessModel}[kind]
    config.architectures = [model_class.__name__]
    config.coref_head = {
        "max_span_length": 10,
        "top_lambda": 0.4,
        "ffnn_size": 16,
        "dropout_prob": 0.3,
        "max_segment_len": segment,
    }
    model_class(config).save_pretrained(path)
    return path
