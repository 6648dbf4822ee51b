#!/usr/bin/env bash
# run-fuzz.sh SECONDS FUZZER...: runs each libFuzzer binary for a bounded time on its
# saved corpus (build/fuzz/corpus/NAME) plus its checked-in seeds (tests/fuzz/seeds/NAME).
# Prints one line per target; on a crash prints the fuzzer's report and fails, leaving
# the reproducer (crash-*) in build/fuzz/artifacts/NAME/.
set -uo pipefail
secs=$1; shift
fail=0
for f in "$@"; do
  n=$(basename "$f")
  corpus=build/fuzz/corpus/$n art=build/fuzz/artifacts/$n/
  mkdir -p "$corpus" "$art"
  dirs=("$corpus")
  [ -d "tests/fuzz/seeds/$n" ] && dirs+=("tests/fuzz/seeds/$n")
  log=build/fuzz/$n.log
  if "$f" -max_total_time="$secs" -max_len=70000 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$art" -print_final_stats=1 "${dirs[@]}" >"$log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz $n: ok, ${execs:-?} inputs in ${secs}s"
  else
    echo "fuzz $n: FAILED (log: $log)"; tail -n 40 "$log"; fail=1
  fi
done
exit $fail
