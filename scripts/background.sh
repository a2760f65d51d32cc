# Sourced by scripts/build and scripts/test: runs a setup step (a command or
# a shell function) in the background while the foreground compiles, with
# its output in target/setup/NAME.log, and waits for it where its result is
# needed. A step that failed stops the script there, with its log.
#
#   in_background NAME COMMAND [ARG...]
#   finish_background NAME

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
