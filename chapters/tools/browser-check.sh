#!/usr/bin/env bash
# Builds the book, serves it on localhost, and opens every page in headless Chromium
# (browser-check.mjs says what fails it). Screenshots go to target/book-screenshots/.
#
# Needs: mdbook 0.5.4 and mdbook-katex 0.10.0 (the README's section "The book"), python3, node
# 18 or later and npm, and Debian's chromium (`apt-get install chromium`; or set CHROMIUM to
# another Chromium or Chrome). puppeteer-core, pinned in tools/browser/package-lock.json, is
# installed with `npm ci` into target/book-tools/ (it downloads no browser).
#   chapters/tools/browser-check.sh            # from the repository root
#   PORT=8123 chapters/tools/browser-check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
port=${PORT:-8765}
tools="$root/target/book-tools"
shots="$root/target/book-screenshots"

mdbook build chapters
python3 chapters/tools/scan_book.py target/book

mkdir -p "$tools"
if ! cmp -s chapters/tools/browser/package-lock.json "$tools/package-lock.json" \
  || [ ! -d "$tools/node_modules/puppeteer-core" ]; then
  cp chapters/tools/browser/package.json chapters/tools/browser/package-lock.json "$tools/"
  (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error)
fi

rm -rf "$shots"
python3 -m http.server "$port" --bind 127.0.0.1 --directory target/book >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/')" \
    2>/dev/null; then break; fi
  sleep 0.1
done
BROWSER_CHECK_MODULES="$tools/node_modules" \
  node chapters/tools/browser-check.mjs target/book "http://127.0.0.1:$port/" "$shots"
