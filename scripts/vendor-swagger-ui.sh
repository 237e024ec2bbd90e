#!/usr/bin/env bash
# vendor-swagger-ui.sh VERSION — refresh the Swagger UI files that GET /docs serves
# (proxy/internal/httpapi/swaggerui) from the npm package swagger-ui-dist.
set -euo pipefail
version=${1:?usage: scripts/vendor-swagger-ui.sh VERSION (e.g. 5.35.0)}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dst=proxy/internal/httpapi/swaggerui
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "swagger-ui-dist@$version" >/dev/null && tar xzf "swagger-ui-dist-$version.tgz")
cp "$tmp/package/swagger-ui.css" "$tmp/package/LICENSE" "$tmp/package/NOTICE" "$dst/"
gzip -9n -c "$tmp/package/swagger-ui-bundle.js" >"$dst/swagger-ui-bundle.js.gz"
sed -i "s/swagger-ui-dist@[0-9.]*/swagger-ui-dist@$version/" "$dst/README.md"
echo "vendored swagger-ui-dist $version into $dst"
