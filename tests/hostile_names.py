"""Bad-input cases: Names that become paths, outputs that collide, output roots inside DAPR_HOME
(issue 38, classes 1-3).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

from bad_input_kit import Bad, Kit, case  # noqa: F401
