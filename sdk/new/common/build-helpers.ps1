# What every build.ps1 of this project starts with (dot-sourced): stop on the
# first error, work in the project's folder, find resmux, and run programs
# so that a failing one stops the build.
$ErrorActionPreference = 'Stop'
Set-Location $PSScriptRoot
# RESMUX if set; else the resmux that wrote this project, or, if it is gone,
# the one on PATH.
$resmux = $env:RESMUX
if (-not $resmux) {
    $resmux = {{resmux-powershell}}
    if (-not (Test-Path -PathType Leaf $resmux)) { $resmux = 'resmux' }
}
# Runs a command and stops the build if it fails (PowerShell stops on its
# own errors only, not on a program's exit code).
function Run {
    $command, $arguments = $args
    & $command @arguments
    if ($LASTEXITCODE -ne 0) { throw "$command failed with exit code $LASTEXITCODE" }
}
