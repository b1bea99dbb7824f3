"""A retriever's presets: named settings (a paper's checkpoint), expanded into its arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dapr.errors import DaprError
from dapr.interfaces import HasPresets, Preset

PAPER_ALPHAS = {
    "dragon_plus": {"convex": 0.3, "hierarchical": 0.2, "convex/jinav2": 0.3},
    "spladev2": {"convex": 0.3, "hierarchical": 0.2, "convex/jinav2": 0.3},
    "colbertv2": {"convex": 0.3, "hierarchical": 0.1, "convex/jinav2": 0.2},
}
"""The weight of the document scores (``alpha``) that the DAPR paper reports for each neural
passage retriever, by fuser: fused with BM25 documents (``convex``: rank fusion;
``hierarchical``) or with JinaV2 documents (``convex/jinav2``, Appendix D: a document system
with the ``jinav2`` preset). The reference scripts give ``passage_weight = 1 - alpha``
(``--report_passage_weight`` 0.7 / 0.7 / 0.7, 0.8 / 0.8 / 0.9 and 0.7 / 0.7 / 0.8)."""


def paper_fusion(preset: str) -> dict[str, dict[str, float]]:
    """A preset's ``fusion`` setting: the paper's alpha for each fuser it was reported with."""
    return {fuser: {"alpha": alpha} for fuser, alpha in PAPER_ALPHAS[preset].items()}


def with_preset(name: str, factory: Any, args: Mapping[str, Any], level: str) -> dict[str, Any]:
    """``args`` with its ``preset`` (if any) expanded into the preset's arguments, which the
    other ``args`` override; a DaprError for an unknown preset or one used at the wrong level."""
    if "preset" not in args:
        return dict(args)
    presets: Mapping[str, Preset] = factory.presets if isinstance(factory, HasPresets) else {}
    chosen = args["preset"]
    if chosen not in presets:
        choices = ", ".join(sorted(presets)) or "it has none"
        raise DaprError(f"retriever {name!r} has no preset {chosen!r}; choose from: {choices}")
    preset = presets[chosen]
    if level not in preset.levels:
        raise DaprError(
            f"preset {chosen!r} of retriever {name!r} is for {' or '.join(preset.levels)}-level "
            f"retrieval, not {level}; set level: {preset.levels[0]} or pick a "
            f"{level}-level preset: "
            + (", ".join(p for p, v in sorted(presets.items()) if level in v.levels) or "none")
        )
    rest = {k: v for k, v in args.items() if k != "preset"}
    return {**preset.args, **rest}


def tuned_fusion(
    factory: Any, args: Mapping[str, Any], fuser: str, document_preset: str | None = None
) -> dict[str, Any]:
    """The arguments that the preset named in a passage retriever's ``args`` tuned for
    ``fuser`` with a document system of ``document_preset`` (None: one without a preset, such
    as BM25), e.g. ``{"alpha": 0.3}``; none when nothing was tuned for that pair."""
    presets: Mapping[str, Preset] = factory.presets if isinstance(factory, HasPresets) else {}
    name = args.get("preset") if isinstance(args, Mapping) else None
    preset = presets.get(name) if isinstance(name, str) else None
    key = fuser if document_preset is None else f"{fuser}/{document_preset}"
    return dict(preset.fusion.get(key, {})) if preset is not None else {}
