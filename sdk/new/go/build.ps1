# Builds {{name}}.wasm on Windows, as build.sh does elsewhere: resmux writes
# the contract's Go bindings as a module in build/go/, this plugin's package
# and the SDK join it, Go compiles it for wasip1, and resmux makes the
# module a component.
. "$PSScriptRoot/build-helpers.ps1"
if (Test-Path build/go) { Remove-Item -Recurse -Force build/go }
New-Item -ItemType Directory -Force build | Out-Null
Run $resmux bindings go build/go
Copy-Item -Recurse export_resmux_provider_provider, resmux build/go/
$env:GOFLAGS = '-mod=mod'
$env:GOPROXY = 'off'
$env:GOTOOLCHAIN = 'local'
$env:GOARCH = 'wasm'
$env:GOOS = 'wasip1'
Push-Location build/go
try {
    Run go build -o core.wasm -buildmode=c-shared -ldflags=-checklinkname=0
} finally {
    Pop-Location
}
Run $resmux componentize build/go/core.wasm 'build/{{name}}.wasm'
Move-Item -Force 'build/{{name}}.wasm' '{{name}}.wasm'
Write-Output 'built {{name}}.wasm'
