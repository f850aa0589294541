#!/usr/bin/env bash
# Quarto's pre-render step (_quarto.yml: project.pre-render), run from the project root
# before every `quarto render`:
#   1. bring the analyses cache up to date (`python -m analyses run --provenance`: only stale analyses
#      are computed, so a warm cache costs the hash check, about a second);
#   2. in the same process, write the provenance appendix and its links' data from the cache
#      (report/provenance.qmd and report/provenance.json, rewritten only when they differ);
#   3. copy plotly.js, from the same plotly package that drew the cached interactive figures,
#      to report/_assets/plotly.min.js (gitignored), which _quarto.yml lists as a resource, so
#      the site serves it itself instead of fetching it from a CDN.
# The Python is $ANALYSES_PYTHON, by default the project's .venv/bin/python (make's symlink to the environment). Any failure stops
# the render with a non-zero exit status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# `make report` (report/_scripts/render-both.sh) runs this step once, then renders both formats without it.
if [ "${ANALYSES_PRERENDERED:-}" = 1 ]; then
  echo "pre-render: done once already by make report"
  exit 0
fi

PY="${ANALYSES_PYTHON:-.venv/bin/python}"
# A Python that answers (not just any program that exits 0, such as /bin/true), recent enough.
if [ "$("$PY" -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)" != "True" ]; then
  echo "pre-render: '$PY' is not a Python ≥ 3.11 to run the analyses: create the project environment (make .venv/.installed) or set ANALYSES_PYTHON." >&2
  exit 1
fi

echo "pre-render: $PY -m analyses run --provenance"
"$PY" -m analyses run --provenance || { echo "pre-render: the analyses or the provenance page failed; not rendering." >&2; exit 1; }

"$PY" - <<'PY'
from pathlib import Path

from plotly.offline import get_plotlyjs, get_plotlyjs_version

target = Path("report/_assets/plotly.min.js")
js = get_plotlyjs().encode("utf-8")
try:  # compared as bytes: a damaged copy (not even UTF-8) is replaced like any other that differs
    if not target.is_file() or target.read_bytes() != js:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(js)
        tmp.replace(target)
except OSError as exc:
    raise SystemExit(f"pre-render: cannot write {target} ({exc.strerror or exc}); not rendering.")
print(f"pre-render: plotly.js {get_plotlyjs_version()} at {target}")
PY
