"""Bad-input cases: Numbers that are NaN, infinite or out of range, and devices this machine lacks
(issue 38, classes 5-6).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

from bad_input_kit import Bad, Kit, case  # noqa: F401
