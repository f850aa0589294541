#!/usr/bin/env bash
# `make report`: the website and the PDF rendered side by side, each complete on its own.
#   1. The pre-render step runs once, here (the cache brought up to date, the provenance appendix written,
#      plotly.js copied); both renders then skip it (ANALYSES_PRERENDERED=1), so no two processes write the cache.
#   2. The website renders in the project; the PDF in a copy of the book's sources in a scratch directory, with
#      its own .quarto/ and _book/, so the two never share Quarto's index or output files (a full render of one
#      format clears _book/). The PDF moves into _book/ once both have finished.
#   3. Both print their progress, each line prefixed [html] or [pdf]. If one fails, the other still finishes; the
#      exit status is non-zero and the last line names the first format that failed and its last message.
# Each render is mostly one core's work, so on two cores both take about as long as the longer one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

bash report/_scripts/pre-render.sh

scratch="$(mktemp -d "${TMPDIR:-/tmp}/render-pdf.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
# What the PDF render reads, copied (about 50 MB): the book's configuration, sources, cached results and filters.
mkdir -p "$scratch/book"
cp -a _quarto.yml _variables.yml index.qmd references.bib report "$scratch/book/"
rm -rf "$scratch/book/report/_assets"

render() {  # render FORMAT DIRECTORY: one format, its lines prefixed; a failure appended to $scratch/failed
  local format="$1" directory="$2" status
  set +e  # a failed render is recorded, not fatal (this runs in a background subshell of its own)
  (cd "$directory" && ANALYSES_PRERENDERED=1 quarto render --to "$format") 2>&1 | tee "$scratch/$format.log" |
    sed -u "s/^/[$format] /"
  status="${PIPESTATUS[0]}"
  if [ "$status" != 0 ]; then echo "$format $status" >> "$scratch/failed"; fi
}

render html . &
html=$!
render pdf "$scratch/book" &
pdf=$!
wait "$html" "$pdf"

if [ -s "$scratch/failed" ]; then
  read -r format status < "$scratch/failed"
  last="$(grep -v '^[[:space:]]*$' "$scratch/$format.log" | tail -n 1)"
  echo "make report: the $([ "$format" = pdf ] && echo PDF || echo website) failed first (quarto exit $status): $last" >&2
  exit 1
fi

pdf_file="$(cd "$scratch/book/_book" && ls -- *.pdf)"
mkdir -p _book
cp "$scratch/book/_book/$pdf_file" "_book/.$pdf_file.tmp"
mv "_book/.$pdf_file.tmp" "_book/$pdf_file"
echo "make report: the website and _book/$pdf_file are rendered."
