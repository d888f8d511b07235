#!/usr/bin/env bash
# Installs the test dependencies, builds twice (plain with -Werror, and with AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs every unit and integration test in both builds.
# The last line is "N passed, M failed[, K skipped]".
#   scripts/test.sh [meson test args...]   e.g. scripts/test.sh --suite unit
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --test || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

passed=0; failed=0; skipped=0
run_build() {
    local dir=$1; shift
    local opts=("$@")
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" --werror "${opts[@]}" >"$dir.setup.log" 2>&1 ||
            { cat "$dir.setup.log"; failed=$((failed + 1)); return; }
    fi
    if ! ninja -C "$dir" >"$dir.ninja.log" 2>&1; then
        tail -50 "$dir.ninja.log"; failed=$((failed + 1)); return
    fi
    meson test -C "$dir" --print-errorlogs --num-processes 2 "${TEST_ARGS[@]}" 2>&1 | tee "$dir.test.log"
    local ok fail skip timeout
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -1)
    fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -1)
    skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -1)
    timeout=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -1)
    upass=$(sed -n 's/^Unexpected Pass: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -1)
    if [ -z "$ok" ]; then failed=$((failed + 1)); return; fi
    passed=$((passed + ok))
    failed=$((failed + ${fail:-0} + ${timeout:-0} + ${upass:-0}))
    skipped=$((skipped + ${skip:-0}))
}

TEST_ARGS=("$@")
run_build build
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    run_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
