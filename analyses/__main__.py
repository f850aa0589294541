"""Entry point for `python -m analyses`."""

import sys

from analyses.cli import main

sys.exit(main())
