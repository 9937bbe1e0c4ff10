#!/usr/bin/env bash
# Builds Strata's libFuzzer targets (tests/fuzz/) with clang, coverage,
# AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/, then runs
# each target for a bounded time and prints, per target, the inputs run, the
# time taken and the crashes found.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#        (default: 60 seconds; targets fuzz_idx fuzz_csv fuzz_checkpoint fuzz_safetensors fuzz_train_args fuzz_model)
# Installs Debian's clang and libclang-rt-dev when they are missing (unless
# STRATA_FUZZ_CXX names a compiler, or STRATA_NO_APT=1).
# Environment:
#   STRATA_FUZZ_CXX    clang++ to use (default: clang++, else clang++-15/-14)
#   STRATA_JOBS        parallel build jobs (default: number of cores)
#   BUILD_DIR          build folder (default: build-fuzz)
#
# Seeds: tests/fuzz/corpus/<target>/ (committed, read only), and a libFuzzer
# dictionary tests/fuzz/<target>.dict where there is one. Inputs that reach
# new code are kept in BUILD_DIR/fuzz-corpus/<target>/ and reused by later
# runs; a crashing input lands in BUILD_DIR/fuzz-artifacts/<target>/ (rerun
# it with BUILD_DIR/bin/<target> FILE). Exits 1 when any target crashed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"

all_targets=(fuzz_idx fuzz_csv fuzz_checkpoint fuzz_safetensors fuzz_train_args fuzz_model)
seconds="${1:-60}"
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in *" $t "*) ;; *) echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2 ;; esac
done

# shellcheck source=scripts/common.sh
source "$here/common.sh"
cxx="${STRATA_FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
  # Debian's default clang and its libFuzzer/sanitizer runtimes (the same
  # version); nothing is installed when they are there.
  strata_apt_install clang libclang-rt-dev || true
  for c in clang++ clang++-15 clang++-14; do command -v "$c" >/dev/null 2>&1 && { cxx="$c"; break; }; done
fi
[ -n "$cxx" ] || { echo "fuzz.sh: no clang++ found (Debian: apt-get install clang libclang-rt-dev)" >&2; exit 2; }

build="${BUILD_DIR:-$top/build-fuzz}"
echo "fuzz.sh: building ${targets[*]} with $cxx in ${build#"$top"/}/"
# The readers need no BLAS, MPI or GPU library: leaving them out keeps one
# OpenMP runtime (clang's libomp) in the fuzzers.
BUILD_DIR="$build" STRATA_TARGETS="${targets[*]}" "$here/build.sh" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_BUILD_FUZZERS=ON \
  -DSTRATA_ENABLE_TESTS=OFF -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_EXAMPLES=OFF \
  -DSTRATA_ENABLE_BLAS=OFF -DSTRATA_ENABLE_MPI=OFF -DSTRATA_ENABLE_NCCL=OFF -DSTRATA_ENABLE_ZLIB=ON -DSTRATA_MAN_PAGES=OFF

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false

results=() crashed=()
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t" artifacts="$build/fuzz-artifacts/$t" log="$build/fuzz-$t.log"
  mkdir -p "$corpus" "$artifacts"
  before=$(find "$artifacts" -type f | wc -l)
  echo "fuzz.sh: $t for ${seconds} s (log ${log#"$top"/})"
  t0=$SECONDS
  dict=()
  [ -f "$top/tests/fuzz/$t.dict" ] && dict=(-dict="$top/tests/fuzz/$t.dict")
  rc=0
  "$build/bin/$t" "$corpus" "$top/tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "${dict[@]}" >"$log" 2>&1 || rc=$?
  elapsed=$((SECONDS - t0))
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  [ -n "$runs" ] || runs="$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')"
  found=$(( $(find "$artifacts" -type f | wc -l) - before ))
  if [ "$rc" != 0 ] && [ "$found" = 0 ]; then found=1; fi   # died without writing an artifact
  results+=("$(printf '%-16s runs %10s   time %4d s   crashes %d' "$t" "${runs:-?}" "$elapsed" "$found")")
  if [ "$found" != 0 ]; then
    crashed+=("$t")
    echo "---- $t: last lines of ${log#"$top"/}" >&2
    tail -n 40 "$log" >&2
    echo "---- $t: crashing inputs in ${artifacts#"$top"/}/" >&2
  fi
done

echo
echo "fuzz.sh summary (${seconds} s per target, $(basename "$cxx"), ASan + UBSan):"
printf '  %s\n' "${results[@]}"
if [ ${#crashed[@]} -gt 0 ]; then
  echo "fuzz.sh: CRASHES in ${crashed[*]}"
  exit 1
fi
echo "fuzz.sh: no crashes"
