#!/usr/bin/env bash
# Builds {{name}}.wasm: resmux writes the contract's Go bindings as a module in
# build/go/, this plugin's package and the SDK join it, Go compiles it for
# wasip1, and resmux makes the module a component.
set -euo pipefail
cd "$(dirname "$0")"
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
if [ -z "${RESMUX:-}" ]; then
    written_by={{resmux}}
    if [ -x "$written_by" ]; then RESMUX=$written_by; else RESMUX=resmux; fi
fi

rm -rf build/go
mkdir -p build
"$RESMUX" bindings go build/go
cp -r export_resmux_provider_provider resmux build/go/
(cd build/go && GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local GOARCH=wasm GOOS=wasip1 \
    go build -o core.wasm -buildmode=c-shared -ldflags=-checklinkname=0)
"$RESMUX" componentize build/go/core.wasm build/{{name}}.wasm
mv build/{{name}}.wasm {{name}}.wasm
echo "built {{name}}.wasm"
