# Sourced by scripts/build, scripts/test and .ci/run: a step timed, and a
# setup step (a command or a shell function) run in the background while
# the foreground compiles, with its output in target/setup/NAME.log,
# waited for where its result is needed. A step that failed stops the
# script there, the background one with its log. And the one selection of
# the workspace that the host's build, tests and lints share.
#
#   timed COMMAND [ARG...]
#   in_background NAME COMMAND [ARG...]
#   finish_background NAME
#   cargo … --workspace "${without_plugins[@]}"

# The plugin crates, left out of the host's selection: components for
# wasm32-wasip2 (scripts/build makes them), with no test for the host.
without_plugins=()
for plugin in files notes conformance liar; do without_plugins+=(--exclude "resmux-plugin-$plugin"); done

timed() {
    local started=$SECONDS
    "$@"
    echo "took $((SECONDS - started)) s: $*" >&2
}

declare -A background_steps=()

in_background() {
    local name=$1
    shift
    mkdir -p target/setup
    "$@" >"target/setup/$name.log" 2>&1 &
    background_steps[$name]=$!
}

finish_background() {
    local name=$1
    if ! wait "${background_steps[$name]}"; then
        cat "target/setup/$name.log" >&2
        echo "$name failed (log: target/setup/$name.log)" >&2
        exit 1
    fi
}
