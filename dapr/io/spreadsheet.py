"""CSV files a spreadsheet opens safely: every CSV dapr writes goes through :func:`csv_text`.

A cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to
a spreadsheet, so a system named ``=HYPERLINK(...)`` would run as one. As OWASP advises, such a
text cell is written with a single quote ``'`` before it (a spreadsheet shows it as text); a
number, e.g. ``-0.25`` dapr formatted itself, stays a number.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a cell that a spreadsheet reads as a formula starts with."""
_NUMBER = re.compile(r"[+-]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def cell(value: object, digits: int = 6) -> str:
    """``value`` as a CSV cell: None blank, a float with ``digits`` decimals, a text that a
    spreadsheet would run as a formula behind a ``'`` (but a number, or a lone ``-``, as is)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    text = str(value)
    if text.startswith(FORMULA_STARTS) and text != "-" and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_text(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    digits: int = 6,
    lineterminator: str = "\r\n",
) -> str:
    """A CSV file of ``header`` and ``rows``, each value written by :func:`cell`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=lineterminator)
    writer.writerow([cell(value, digits) for value in header])
    writer.writerows([cell(value, digits) for value in row] for row in rows)
    return buffer.getvalue()
