"""How an experiment's outcome reads as tables: the system means (markdown, CSV), the cost of
contextualizing (the DAPR paper's Table 6) and the metric per query category."""

from __future__ import annotations

from collections.abc import Sequence

from dapr.analysis.model import Result
from dapr.experiment.contextualize import Cost
from dapr.experiment.runner import Outcome
from dapr.experiment.spec import Published
from dapr.io import spreadsheet


def rows(outcome: Outcome) -> list[dict[str, object]]:
    """One row per system: its name, level, the number of queries evaluated, the mean of every
    metric, and the published value of each metric the experiment's ``published:`` gives."""
    published = outcome.experiment.published
    values = published.values if published is not None else {}
    found = []
    for system, evaluation in outcome.evaluations.items():
        first = next(iter(evaluation.per_query.values()), {})
        row = {"system": system, "level": outcome.levels[system], "queries": len(first)}
        row |= {m: evaluation.means[m] for m in outcome.experiment.metrics}
        for metric in published_metrics(outcome):
            row[f"{metric} (published)"] = values.get(system, {}).get(metric)
        found.append(row)
    return found


def published_metrics(outcome: Outcome) -> list[str]:
    """The experiment's metrics that ``published:`` gives a value of, in the experiment's order."""
    published = outcome.experiment.published
    given = {m for values in published.values.values() for m in values} if published else set()
    return [m for m in outcome.experiment.metrics if m in given]


def paper_markdown(
    found: Sequence[Result], published: Sequence[Published | None], metric: str
) -> str:
    """Each system's ``metric`` beside the paper's value for its dataset and the difference
    (dapr minus the paper), for the results whose experiment has a ``published:`` block; where
    the paper has no column for the dataset, its values on the others, not compared."""
    lines = []
    for result, paper in zip(found, published):
        if paper is None:
            continue
        for system in result.systems.values():
            ours = system.mean.get(metric)
            given = paper.value(system.name, metric, result.dataset)
            if given is not None and isinstance(ours, int | float):
                value, source = given
                compared = [f"{value:.4f}", f"{ours - value:+.4f}", source]
            else:
                other = [
                    (f"{d} {v:.4f}", f"{paper.source}, {row.table}, {row.row}")
                    for row in paper.rows
                    if row.system == system.name and row.metric == metric
                    for d, v in row.values.items()
                ]
                if not other or not isinstance(ours, int | float):
                    continue
                compared = [
                    "; ".join(cell for cell, _ in other),
                    f"none: the paper has no {result.dataset} column",
                    other[0][1],
                ]
            cells = [system.name, result.dataset, f"{ours:.4f}", *compared]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if not lines:
        return ""
    head = f"| system | dataset | dapr {metric} | paper | difference | the paper's table and row |"
    return "\n".join([head, "|---|---|---:|---|---:|---|", *lines]) + "\n"


def markdown(outcome: Outcome) -> str:
    found = rows(outcome)
    columns = list(found[0]) if found else ["system", "level", "queries"]
    lines = ["| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]
    for row in found:
        lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
    published = outcome.experiment.published
    if published is not None and published_metrics(outcome):
        lines += ["", f"published: {published.source}"]
    return "\n".join(lines) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def csv_text(outcome: Outcome) -> str:
    found = rows(outcome)
    columns = list(found[0]) if found else ["system", "level", "queries"]
    return spreadsheet.csv_text(columns, ([row[c] for c in columns] for row in found))


def training_markdown(trained: dict[str, dict]) -> str:
    """One row per trained model, from its card: what it started from, what it was trained on
    (examples, with those left out for too few negatives; negatives per example, steps, final
    loss), the mined candidates its denoising cross-encoder removed, and the pseudo-labelled
    examples augmentation added."""
    if not trained:
        return ""
    lines = [
        "| model | kind | from | examples | negatives | steps | loss | denoised | augmented |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for name, card in trained.items():
        denoised = card.get("denoising")
        removed = (
            f"{sum(denoised['removed']):,} of {sum(denoised['scored']):,} removed"
            if denoised
            else ""
        )
        augmented = card.get("augmentation")
        added = (
            f"{augmented['examples']:,} examples from {augmented['with_positive']:,} of "
            f"{augmented['queries']:,} queries"
            if augmented
            else ""
        )
        short = f" ({card['left_out']:,} short left out)" if card.get("left_out") else ""
        lines.append(
            f"| trained/{name} | {card.get('kind', 'dual')} | {card['base_model']} | "
            f"{card['examples']:,}{short} | {card['negatives_per_example']} | {card['steps']} | "
            f"{card['training_loss']:.4f} | {removed} | {added} |"
        )
    return "\n".join(lines) + "\n"


def cost_rows(
    costs: dict[str, Cost], outcome: Outcome | None = None, of: str = "system"
) -> list[dict[str, str]]:
    """The DAPR paper's Table 6 per system: the contextualizer chain, its speed per process, the
    process time for the whole corpus (estimated at that speed when only a sample ran), and
    the system's score (nDCG@10 when the experiment measures it)."""
    metric = headline_metric(outcome) if outcome else None
    rows = []
    for system, cost in costs.items():
        row = {
            "approach": cost.approach,
            of: system,
            "speed (words/s)": _speed(cost),
            "total latency": duration(cost.estimated_seconds)
            + (" (estimated)" if cost.corpus_words is not None else ""),
            "documents": f"{cost.documents:,}",
            "computed now": f"{cost.computed:,}",
            "workers": str(cost.workers),
            "wall (this run)": duration(cost.wall_seconds),
        }
        if metric and outcome is not None:  # (a metric implies an outcome)
            row[metric] = f"{outcome.evaluations[system].means[metric]:.4f}"
        rows.append(row)
    return rows


def cost_markdown(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def headline_metric(outcome: Outcome) -> str:
    metrics = outcome.experiment.metrics
    return "nDCG@10" if "nDCG@10" in metrics else metrics[0]


MEASURABLE = 0.05
"""Process seconds below which a pass was too quick for its speed to mean anything."""


def _speed(cost: Cost) -> str:
    """Words per second, or where the pass took under :data:`MEASURABLE` seconds (a title
    prepended in microseconds), a bound instead of a figure dominated by timer resolution."""
    if not cost.seconds:
        return "-"
    if cost.seconds < MEASURABLE:
        return f"> {cost.words / MEASURABLE:,.0f} (under {MEASURABLE} s in all)"
    return f"{cost.words_per_second:,.1f}"


def duration(seconds: float) -> str:
    """``seconds`` as a reader takes it in: 0.4 s, 2.1 min, 3.2 h."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


def category_markdown(metrics: dict, metric: str) -> str:
    """``metric`` per query category (columns, with their query counts) and system (rows)."""
    from dapr.analysis.categories import category_table

    systems = [s for s, v in metrics["systems"].items() if v["level"] == "passage"]
    if not systems:
        return ""
    table, counts = category_table(metrics, metric, systems)
    columns = [f"{c} (n={n})" for c, n in counts.items()]
    lines = [f"| {metric} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for system, means in table.items():
        lines.append(f"| {system} | " + " | ".join(f"{means[c]:.4f}" for c in counts) + " |")
    return "\n".join(lines) + "\n"


def table_csv(rows: list[dict[str, str]]) -> str:
    columns = list(rows[0])
    return spreadsheet.csv_text(columns, ([row[c] for c in columns] for row in rows))
