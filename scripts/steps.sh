# Sourced by scripts/build, scripts/test and .ci/run: a step timed, and a
# setup step (a command or a shell function) run in the background while
# the foreground compiles, with its output in target/setup/NAME.log,
# waited for where its result is needed. A step that failed stops the
# script there, the background one with its log.
#
#   timed COMMAND [ARG...]
#   in_background NAME COMMAND [ARG...]
#   finish_background NAME

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
