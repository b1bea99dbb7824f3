"""``python -m dapr.cli``: the ``dapr`` command."""

import sys

from dapr.cli import main

sys.exit(main())
