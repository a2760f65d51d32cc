#!/usr/bin/env bash
# Builds {{name}}.wasm: resmux writes the contract's C bindings into
# build/bindings/, clang compiles {{name}}.c (with resmux.h beside it) for
# wasm32-wasi against wasi-libc, and resmux makes the module a component.
# CC picks the compiler (default clang-19, else clang); WASI_SYSROOT the
# wasi-libc sysroot (default /usr, where Debian's wasi-libc lives).
set -euo pipefail
cd "$(dirname "$0")"
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
if [ -z "${RESMUX:-}" ]; then
    written_by={{resmux}}
    if [ -x "$written_by" ]; then RESMUX=$written_by; else RESMUX=resmux; fi
fi

if [ -z "${CC:-}" ]; then
    CC=clang-19
    command -v "$CC" >/dev/null || CC=clang
fi
mkdir -p build
"$RESMUX" bindings c build/bindings
"$CC" --target=wasm32-wasi "--sysroot=${WASI_SYSROOT:-/usr}" -O2 -Wall -mexec-model=reactor -I build/bindings \
    -o build/{{name}}.module.wasm \
    {{name}}.c build/bindings/plugin.c build/bindings/plugin_component_type.o
"$RESMUX" componentize build/{{name}}.module.wasm build/{{name}}.wasm
mv build/{{name}}.wasm {{name}}.wasm
echo "built {{name}}.wasm"
