#!/usr/bin/env bash
# Copies KaTeX's stylesheet and fonts from the npm package into chapters/theme/katex/, where the
# book serves them from itself (book.toml: additional-css), so the typeset math shows offline and
# no page asks a CDN for anything.
#
# The files are committed: building the book needs mdbook and mdbook-katex and nothing else (no
# npm, no network). Run this only to change the KaTeX version, which must be the one
# mdbook-katex typesets with (mdbook-katex 0.10.0 renders with the `katex` crate 0.4.6, which
# bundles KaTeX 0.16.4: its KATEX-VERSION file), since the HTML and the CSS must agree.
#
# Only the WOFF2 fonts are kept (every browser of the last years reads them; 296 KB instead of
# 1.2 MB): the stylesheet's font sources are cut down to the WOFF2 entry, so it names no file the
# book lacks (tools/scan_book.py checks every url() in the built CSS).
set -euo pipefail
VERSION=${1:-0.16.4}
here=$(cd "$(dirname "$0")" && pwd)
dest="$here/../theme/katex"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "katex@$VERSION" >/dev/null && tar xzf "katex-$VERSION.tgz")
pkg="$work/package"
rm -rf "$dest"
mkdir -p "$dest/fonts"
cp "$pkg"/dist/fonts/*.woff2 "$dest/fonts/"
cp "$pkg/LICENSE" "$dest/LICENSE"
# src:url(a.woff2) format("woff2"),url(a.woff) format("woff"),url(a.ttf) format("truetype")
#   -> src:url(a.woff2) format("woff2")
sed -E 's/,url\([^)]*\.woff\) format\("woff"\),url\([^)]*\.ttf\) format\("truetype"\)//g' \
  "$pkg/dist/katex.min.css" > "$dest/katex.min.css"
if grep -qE '\.(woff|ttf)\)' "$dest/katex.min.css"; then
  echo "vendor-katex.sh: the stylesheet still names WOFF or TTF fonts" >&2
  exit 1
fi
printf 'KaTeX %s from the npm package katex@%s (MIT, see LICENSE): dist/katex.min.css with\nonly its WOFF2 font sources, and dist/fonts/*.woff2. Written by ../../tools/vendor-katex.sh.\n' \
  "$VERSION" "$VERSION" > "$dest/README"
echo "vendor-katex.sh: KaTeX $VERSION into $dest ($(du -sh "$dest" | cut -f1))"
