"""``python -m attnscope.explorer explore RESULTS_DIR``: the ``attnscope`` command without its script."""

import sys

from attnscope.explorer.cli import main

sys.exit(main())
