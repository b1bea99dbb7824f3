"""``dapr plugins``: every registered component, where it comes from, and its presets."""

from __future__ import annotations

import argparse

from dapr import registry
from dapr.interfaces import HasPresets

REGISTRIES = (
    registry.datasets,
    registry.retrievers,
    registry.contextualizers,
    registry.fusers,
    registry.metrics,
)


def add(commands: argparse._SubParsersAction) -> None:
    plugins = commands.add_parser("plugins", help="list the installed components")
    plugins.set_defaults(handler=_plugins)


def _plugins(args: argparse.Namespace) -> int:
    for reg in REGISTRIES:
        rows = reg.sources()
        print(f"{reg.group} ({len(rows)})")
        name_width = max((len(r[0]) for r in rows), default=0)
        dist_width = max((len(r[1]) for r in rows), default=0)
        target_width = max((len(r[2]) for r in rows), default=0)
        for name, dist, target in rows:
            line = f"  {name:<{name_width}}  {dist:<{dist_width}}  {target:<{target_width}}"
            print((line + _presets(reg, name)).rstrip())
    return 0


def _presets(reg: registry.Registry, name: str) -> str:
    """``  presets: a, b`` for a component that has presets ('' if it has none or cannot load)."""
    if reg is not registry.retrievers:
        return ""
    try:
        found = reg.get(name)
    except Exception as error:  # noqa: BLE001 - a broken plugin is reported, not fatal
        return f"  (cannot load: {type(error).__name__}: {str(error).splitlines()[0][:80]})"
    presets = found.presets if isinstance(found, HasPresets) else {}
    return f"  presets: {', '.join(sorted(presets))}" if presets else ""
