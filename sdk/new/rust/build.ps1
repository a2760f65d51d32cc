# Builds {{name}}.wasm on Windows, as build.sh does elsewhere: the contract
# from resmux, then cargo for wasm32-wasip2.
. "$PSScriptRoot/build-helpers.ps1"
Run $resmux wit wit
if ((Get-Command rustup -ErrorAction SilentlyContinue) -and -not ((rustup target list --installed) -contains 'wasm32-wasip2')) {
    Run rustup target add wasm32-wasip2
}
Run cargo build --quiet --release --target wasm32-wasip2
$target = if ($env:CARGO_TARGET_DIR) { $env:CARGO_TARGET_DIR } else { 'target' }
New-Item -ItemType Directory -Force build | Out-Null
Copy-Item "$target/wasm32-wasip2/release/plugin.wasm" 'build/{{name}}.wasm'
Move-Item -Force 'build/{{name}}.wasm' '{{name}}.wasm'
Write-Output 'built {{name}}.wasm'
