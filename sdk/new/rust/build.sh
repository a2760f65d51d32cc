#!/usr/bin/env bash
# Builds {{name}}.wasm: the contract from resmux, then cargo for wasm32-wasip2.
set -euo pipefail
cd "$(dirname "$0")"
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
if [ -z "${RESMUX:-}" ]; then
    written_by={{resmux}}
    if [ -x "$written_by" ]; then RESMUX=$written_by; else RESMUX=resmux; fi
fi
"$RESMUX" wit wit
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2 >&2
fi
cargo build --quiet --release --target wasm32-wasip2
mkdir -p build
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/plugin.wasm" build/{{name}}.wasm
mv build/{{name}}.wasm {{name}}.wasm
echo "built {{name}}.wasm"
