# Builds {{name}}.wasm on Windows, as build.sh does elsewhere: app.py and
# resmux_sdk.py with componentize-py, against the contract resmux writes
# into wit/; the finished component is renamed into place at once.
. "$PSScriptRoot/build-helpers.ps1"
Run $resmux wit wit | Out-Null
New-Item -ItemType Directory -Force build | Out-Null
$env:RUST_LIB_BACKTRACE = '0'
Run componentize-py -d wit -w resmux:provider/plugin componentize app -p . -o 'build/{{name}}.wasm' | Out-Null
Move-Item -Force 'build/{{name}}.wasm' '{{name}}.wasm'
Write-Output 'built {{name}}.wasm'
