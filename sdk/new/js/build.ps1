# Builds {{name}}.wasm on Windows, as build.sh does elsewhere: app.js (and
# resmux.js beside it) with componentize-js, installed into node_modules/
# by npm on the first build.
. "$PSScriptRoot/build-helpers.ps1"
if (-not (Test-Path node_modules)) {
    Run npm install --no-audit --no-fund --loglevel=error | Out-Null
}
Run $resmux wit wit
# componentize-js reports a syntax error without its place; node names it.
Run node --check app.js
New-Item -ItemType Directory -Force build | Out-Null
Run npx --no-install componentize-js app.js --wit wit -n plugin -d fetch-event -o 'build/{{name}}.wasm'
Move-Item -Force 'build/{{name}}.wasm' '{{name}}.wasm'
Write-Output 'built {{name}}.wasm'
