# progress.sh -- sourced by the build scripts: follow_build LOG PID prints what a running build
# (PID, writing LOG) compiles as it goes ("build [42%] src/core/plan.c"; under Ninja "[25/137]")
# and a line at least every 30 s while one file takes long (nvcc on the CUDA kernels); returns
# the build's exit status.
follow_build() {
    local blog=$1 pid=$2 shown=0 start now quiet_since current="" lines new
    # a background job ignores Ctrl-C in a script: the callers start the build in a process
    # group of its own (set -m), so that the whole group (make and its compilers) stops with the
    # script
    trap 'kill -- -"$pid" 2>/dev/null; exit 130' INT TERM
    start=$(date +%s)
    quiet_since=$start
    while kill -0 "$pid" 2>/dev/null; do
        sleep 2
        lines=$(wc -l <"$blog")
        if [ "$lines" -gt "$shown" ]; then
            new=$(sed -n "$((shown + 1)),${lines}p" "$blog" |
                sed -nE 's#^ *\[ *([0-9]+%|[0-9]+/[0-9]+)\] (Building|Linking) [A-Za-z ]*(object|library|executable) (CMakeFiles/[^/]*\.dir/)?#build [\1] #p' |
                sed -E 's#\.o$##')
            shown=$lines
            if [ -n "$new" ]; then
                printf '%s\n' "$new"
                current=$(printf '%s\n' "$new" | tail -1)
                quiet_since=$(date +%s)
            fi
        fi
        now=$(date +%s)
        if [ $((now - quiet_since)) -ge 30 ]; then
            echo "build: still at ${current#build } ($((now - start)) s in)"
            quiet_since=$now
        fi
    done
    trap - INT TERM
    if ! wait "$pid"; then
        grep -E "error|Error" "$blog" | head -40
        tail -20 "$blog"
        echo "build: failed (full log: $blog)"
        return 1
    fi
    echo "build: done in $(($(date +%s) - start)) s"
}

# wait_with_heartbeat PID WHAT: waits for PID, saying "WHAT (N s)" every 30 s; its exit status.
wait_with_heartbeat() {
    local pid=$1 what=$2 start last now
    start=$(date +%s)
    last=$start
    while kill -0 "$pid" 2>/dev/null; do
        sleep 2
        now=$(date +%s)
        if [ $((now - last)) -ge 30 ]; then
            echo "$what ($((now - start)) s)"
            last=$now
        fi
    done
    wait "$pid"
}
