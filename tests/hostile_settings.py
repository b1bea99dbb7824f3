"""Bad-input cases: Environment variables, reader limits, spreadsheet formulas, small messages
(issue 38, classes 4, 7, 9, 10).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

from bad_input_kit import Bad, Kit, case  # noqa: F401
