# Builds {{name}}.wasm on Windows, as build.sh does elsewhere: resmux writes
# the contract's C bindings into build/bindings/, clang compiles {{name}}.c
# for wasm32-wasi against wasi-libc, and resmux makes the module a
# component. CC picks the compiler (default clang); WASI_SYSROOT must name
# the wasi-sysroot folder of the WASI SDK
# (https://github.com/WebAssembly/wasi-sdk/releases).
. "$PSScriptRoot/build-helpers.ps1"
$cc = if ($env:CC) { $env:CC } else { 'clang' }
if (-not $env:WASI_SYSROOT) {
    throw 'set WASI_SYSROOT to the share\wasi-sysroot folder of the WASI SDK'
}
New-Item -ItemType Directory -Force build | Out-Null
Run $resmux bindings c build/bindings
Run $cc --target=wasm32-wasi "--sysroot=$env:WASI_SYSROOT" -O2 -Wall -mexec-model=reactor -I build/bindings `
    -o 'build/{{name}}.module.wasm' `
    '{{name}}.c' build/bindings/plugin.c build/bindings/plugin_component_type.o
Run $resmux componentize 'build/{{name}}.module.wasm' 'build/{{name}}.wasm'
Move-Item -Force 'build/{{name}}.wasm' '{{name}}.wasm'
Write-Output 'built {{name}}.wasm'
