"""Bad-input cases: What dapr check must find in train: blocks before any work (issue 38, class 8).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

from bad_input_kit import Bad, Kit, case  # noqa: F401
