#!/usr/bin/env bash
# Builds {{name}}.wasm from app.js (and resmux.js beside it) with
# componentize-js, installed into node_modules/ by npm on the first build.
set -euo pipefail
cd "$(dirname "$0")"
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
if [ -z "${RESMUX:-}" ]; then
    written_by={{resmux}}
    if [ -x "$written_by" ]; then RESMUX=$written_by; else RESMUX=resmux; fi
fi

if [ ! -d node_modules ]; then
    npm install --no-audit --no-fund --loglevel=error >/dev/null
fi
"$RESMUX" wit wit
# componentize-js reports a syntax error without its place; node names it.
node --check app.js
mkdir -p build
node_modules/.bin/componentize-js app.js --wit wit -n plugin -d fetch-event -o build/{{name}}.wasm
mv build/{{name}}.wasm {{name}}.wasm
echo "built {{name}}.wasm"
