#!/usr/bin/env bash
# Runs the official MCP conformance suite (every scenario, `--suite all`)
# against `resmux serve --http` serving the conformance plugin as scheme
# `test`, at 2025-11-25 and at 2026-07-28. Scenarios that need the suite's own
# test tools or prompts, which resmux does not serve, are expected failures,
# each listed with its reason in baseline-<revision>.yml; any other failure,
# or an expected failure that passes, fails this script. Run by ./run, which
# installs the suite.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export PATH="$here/node_modules/.bin:$PATH"

work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/plugins"
cp "$root/target/plugins/conformance.wasm" "$root/target/plugins/conformance.toml" "$work/plugins/"
# Compiled ahead of time, so the suite's first listing already holds it.
"$root/target/release/resmux" compile --cache-dir "$work/cache" "$work/plugins" >/dev/null
"$root/target/release/resmux" serve --plugins "$work/plugins" --cache-dir "$work/cache" \
    --http 127.0.0.1:0 2>"$work/server.log" &
server=$!
for _ in $(seq 100); do
    url="$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$work/server.log" || true)"
    [ -n "$url" ] && break
    sleep 0.1
done
[ -n "$url" ] || { cat "$work/server.log"; echo "resmux did not start"; exit 1; }

status=0
for revision in 2025-11-25 2026-07-28; do
    echo "== conformance at $revision against $url"
    conformance server --url "$url" --spec-version "$revision" --suite all \
        --expected-failures "$here/baseline-$revision.yml" >"$work/$revision.txt" 2>&1 || status=1
    grep -E '^(✓|✗)|^Total|regression|stale|Unexpected|unexpected' "$work/$revision.txt" || true
done
if [ "$status" -ne 0 ]; then
    echo "conformance failed; the server's log:"
    tail -50 "$work/server.log"
fi
exit "$status"
