"""``python -m cefl_opt.cli``: the ``cefl-opt`` command."""
import sys

from . import main

sys.exit(main())
