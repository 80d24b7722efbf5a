#!/usr/bin/env bash
# Re-fetch the vendored front-end assets from the npm registry at pinned
# versions and copy them into static/vendor/. No CDN is ever used at run time:
# Django serves these files from our own static files.
#
# Usage: scripts/vendor_static.sh        (from anywhere; needs npm, node, tar)
#
# Each tarball is checked against the pinned sha512 integrity (the registry's
# dist.integrity) before anything is copied, so a re-run reproduces the exact
# same files.
set -euo pipefail

KATEX_VERSION="0.19.1"
KATEX_INTEGRITY="sha512-jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRhKvr5614uRrEfA=="
HTMX_VERSION="2.0.11"
HTMX_INTEGRITY="sha512-Thx/WtpeOQqSrqBCw/A1cwGJGg4UrVa3+sW0GmrM3p4gJgO89ecH4qtbnyzDDWFvBTqjnIMCgELTNt636dtamA=="
CHARTJS_VERSION="4.6.1"
CHARTJS_INTEGRITY="sha512-hJyniucsFmq//EvXYvJ6c6mahPoI3kaxdjVH8awTaJ/fDNWeSqqqArixMJWkWNN6fcYvPU3HneSANFNYtRi61g=="

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDOR="$REPO_ROOT/static/vendor"

for tool in npm node tar; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is required" >&2; exit 1; }
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# fetch NAME VERSION INTEGRITY -> unpacks into $TMP/NAME/package
fetch() {
    local name="$1" version="$2" integrity="$3" tgz actual
    mkdir -p "$TMP/$name"
    tgz="$(cd "$TMP/$name" && npm pack --silent "$name@$version" 2>/dev/null | tail -n 1)"
    actual="sha512-$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$TMP/$name/$tgz")"
    if [[ "$actual" != "$integrity" ]]; then
        echo "error: integrity mismatch for $name@$version" >&2
        echo "  expected $integrity" >&2
        echo "  got      $actual" >&2
        exit 1
    fi
    tar -x -z -f "$TMP/$name/$tgz" -C "$TMP/$name"
    echo "fetched $name@$version ($tgz)"
}

fetch katex "$KATEX_VERSION" "$KATEX_INTEGRITY"
fetch htmx.org "$HTMX_VERSION" "$HTMX_INTEGRITY"
fetch chart.js "$CHARTJS_VERSION" "$CHARTJS_INTEGRITY"

rm -rf "$VENDOR/katex" "$VENDOR/htmx" "$VENDOR/chartjs"
mkdir -p "$VENDOR/katex/contrib" "$VENDOR/katex/fonts" "$VENDOR/htmx" "$VENDOR/chartjs"

# KaTeX: JS, CSS, auto-render, and only the .woff2 fonts (the CSS lists woff2
# first in every @font-face; the woff/ttf fallbacks are never fetched by
# browsers that support woff2, which is all current ones).
K="$TMP/katex/package"
cp "$K/dist/katex.min.js" "$K/dist/katex.min.css" "$VENDOR/katex/"
cp "$K/dist/contrib/auto-render.min.js" "$VENDOR/katex/contrib/"
cp "$K"/dist/fonts/*.woff2 "$VENDOR/katex/fonts/"
cp "$K/LICENSE" "$VENDOR/katex/LICENSE"

# htmx 2.x
H="$TMP/htmx.org/package"
cp "$H/dist/htmx.min.js" "$VENDOR/htmx/"
cp "$H/LICENSE" "$VENDOR/htmx/LICENSE"

# Chart.js 4.x UMD build (the package ships its license as LICENSE.md)
C="$TMP/chart.js/package"
cp "$C/dist/chart.umd.min.js" "$VENDOR/chartjs/"
cp "$C/LICENSE.md" "$VENDOR/chartjs/LICENSE"

# Every woff2 font the KaTeX CSS references must be present.
missing=0
while read -r font; do
    if [[ ! -f "$VENDOR/katex/$font" ]]; then
        echo "error: katex.min.css references missing $font" >&2
        missing=1
    fi
done < <(grep -o 'url(fonts/[^)]*\.woff2)' "$VENDOR/katex/katex.min.css" | sed 's/^url(//; s/)$//' | sort -u)
[[ "$missing" -eq 0 ]] || exit 1

cat > "$VENDOR/README.md" <<README
# Vendored front-end assets

Stepwise never loads anything from a CDN. These files are served by Django
from our own static files (\`{% static 'vendor/...' %}\`).

Do not edit them by hand: they are produced by \`scripts/vendor_static.sh\`,
which fetches the pinned versions below from the npm registry with \`npm pack\`,
checks each tarball's sha512 integrity, and copies the files here. To upgrade,
change the version and integrity (\`npm view <pkg>@<version> dist.integrity\`)
in that script and re-run it.

| package | version | files | license |
| --- | --- | --- | --- |
| [katex](https://www.npmjs.com/package/katex) | $KATEX_VERSION | \`katex/katex.min.js\`, \`katex/katex.min.css\`, \`katex/contrib/auto-render.min.js\`, \`katex/fonts/*.woff2\` (woff2 only), \`katex/LICENSE\` | MIT |
| [htmx.org](https://www.npmjs.com/package/htmx.org) | $HTMX_VERSION | \`htmx/htmx.min.js\`, \`htmx/LICENSE\` | 0BSD |
| [chart.js](https://www.npmjs.com/package/chart.js) | $CHARTJS_VERSION | \`chartjs/chart.umd.min.js\` (UMD build), \`chartjs/LICENSE\` | MIT |

Notes:

- KaTeX's CSS lists \`woff2\`, then \`woff\`, then \`ttf\` in each \`@font-face\`.
  Only the woff2 files are vendored; every browser Stepwise supports picks
  woff2 first, so the fallbacks are never requested. The script fails if a
  woff2 file that the CSS references is missing.
- Chart.js ships its license as \`LICENSE.md\`; it is copied as \`chartjs/LICENSE\`.
README

echo "vendored into $VENDOR:"
(cd "$VENDOR" && find . -type f | sort | xargs du -b | awk '{printf "  %8d  %s\n", $1, $2}')
echo "total: $(du -sb "$VENDOR" | cut -f1) bytes"
