"""A retriever's presets: named settings (a paper's checkpoint), expanded into its arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dapr.errors import DaprError
from dapr.interfaces import HasPresets, Preset


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
