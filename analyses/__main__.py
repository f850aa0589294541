"""Entry point for `python -m analyses`."""

import sys

from analyses.engine.cli import main

sys.exit(main())
