"""Entry point for `python -m analyses`: an interrupt during start-up, or a Python without the project's
packages, is one line on stderr too (exit 130 or 2), not a traceback."""

import sys

try:
    if sys.version_info < (3, 11):
        raise ModuleNotFoundError(f"Python {sys.version.split()[0]} is older than 3.11", name="python>=3.11")
    from analyses.engine.cli import main

    code = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    code = 130
except ModuleNotFoundError as exc:
    print(f"error: {sys.executable} lacks {exc.name!r}, which the analyses need: use the project's environment "
          "(make .venv/.installed) or set ANALYSES_PYTHON to one that has the package installed", file=sys.stderr)
    code = 2
sys.exit(code)
