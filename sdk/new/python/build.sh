#!/usr/bin/env bash
# Builds {{name}}.wasm from app.py and resmux_sdk.py with componentize-py, against the
# contract resmux writes into wit/; the finished component is renamed into place at once,
# so a resmux watching this folder never loads half a file. Errors come without Rust's
# backtrace even when RUST_BACKTRACE is set.
set -euo pipefail
cd "$(dirname "$0")"
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
if [ -z "${RESMUX:-}" ]; then
    written_by={{resmux}}
    if [ -x "$written_by" ]; then RESMUX=$written_by; else RESMUX=resmux; fi
fi
"$RESMUX" wit wit >/dev/null
mkdir -p build
RUST_LIB_BACKTRACE=0 componentize-py -d wit -w resmux:provider/plugin componentize app -p . -o build/{{name}}.wasm >/dev/null
mv build/{{name}}.wasm {{name}}.wasm
echo "built {{name}}.wasm"
