#!/usr/bin/env bash
# On a machine with a GPU: build, run every test (GPU tiers included), the
# demo, every benchmark, and the GPU tests under compute-sanitizer (memcheck,
# racecheck) at reduced sizes. With two or more GPUs, also the multigpu tier
# on its own and test_multi_gpu under compute-sanitizer. Logs and JSON go to
# OUTDIR; a summary table is printed last. OUTDIR ends up holding the JSON
# results and logs.tar.gz.
# Exit status 0 only if every step passed.
#   tools/gpu_check.sh OUTDIR [BUILD_DIR]
set -uo pipefail
out=${1:?usage: tools/gpu_check.sh OUTDIR [BUILD_DIR]}
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=${2:-build-gpu}
logs=$out/logs
mkdir -p "$logs"
cd "$(dirname "$0")/.."
san=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
summary=()
failed=0
budget=${GPU_CHECK_BUDGET:-100000} # seconds; later steps are skipped past it
skip_steps=" ${GPU_CHECK_SKIP:-} " # step names to leave out, e.g. "bench_pack anchors"
step() { # step NAME CMD... : run, log to OUTDIR/logs/NAME.log, record the outcome
  local name=$1; shift
  local t0=$SECONDS
  if [[ $skip_steps == *" $name "* ]]; then
    summary+=("$(printf '%-28s skipped (GPU_CHECK_SKIP)' "$name")")
    return 0
  fi
  if [ "$SECONDS" -ge "$budget" ]; then
    summary+=("$(printf '%-28s skipped (time budget)' "$name")")
    return 0
  fi
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  return $rc
}

# SP_CUDA_ARCHS (e.g. 90) builds for fewer architectures, to save build time.
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSP_FUZZ=OFF \
  ${SP_CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$SP_CUDA_ARCHS} || { cat "$logs/configure.log"; exit 1; }
step build cmake --build "$build" -j "$(nproc)" || { tail -40 "$logs/build.log"; exit 1; }
# GPU_CHECK_PHASES: "tests" (ctest, sanitizers), "bench" (demo, benchmarks),
# "decide" (the runs that decide the plan constants not yet measured:
# docs/TUNING.md's sections say which) or a list; "tests,bench" by default. A
# later call with another phase reuses the build.
phases=${GPU_CHECK_PHASES:-tests,bench}
if [[ $phases == *tests* ]]; then
step ctest ctest --test-dir "$build" --output-on-failure -j 4
# GPUs this process sees (CUDA_VISIBLE_DEVICES applies), from `stridepack version`.
ngpu=$("$build/tools/stridepack" version | sed -n 's/^CUDA: usable: \([0-9]*\) device.*/\1/p')
gpu_tests="test_gpu_pack test_boundary_gpu test_copy_batch_gpu test_kda_gpu test_kda_engine_gpu test_errors_gpu test_pack_gpu test_bitpatterns_gpu test_gpu_device test_conv_gpu"
if [ "${ngpu:-0}" -ge 2 ]; then
  step ctest_multigpu ctest --test-dir "$build" -L multigpu --output-on-failure
  gpu_tests="$gpu_tests test_multi_gpu"
else
  summary+=("$(printf '%-28s skipped (%s GPU)' multigpu "${ngpu:-0}")")
fi
# Tests under each tool (override to spend less time): every GPU test by default.
for tool in memcheck racecheck; do
  var="GPU_CHECK_$(echo $tool | tr a-z A-Z)"
  for t in ${!var:-$gpu_tests}; do
    exe=$(find "$build/tests" -type f -name "$t" | head -n 1)
    SP_TEST_SMALL=1 step "san_${tool}_$t" \
      "$san" --tool "$tool" --error-exitcode 99 "$exe"
  done
done
fi
if [[ $phases == *bench* ]]; then
step demo "$build/tools/stridepack" demo --device cuda
rm -f "$out"/h200_*.json
step bench_pack "$build/bench/bench_pack" --json "$out/h200_pack.json"
step bench_pack_all_gpus "$build/bench/bench_pack" --all-gpus --json "$out/h200_pack_all_gpus.json"
step bench_kda "$build/bench/bench_kda" --json "$out/h200_kda.json"
# Every kernel on each gate form at the gate comparison's shapes (the chunked
# kernels' every-gate builds beside the recurrent kernel).
bench_kda_gates() {
  local g s
  for g in softplus log_decay log_decay_f32; do
    for s in "16384 96 1" "16384 32 1" "16384 16 1" "8192 32 4"; do
      "$build/bench/bench_kda" --gate "$g" --shape $s --json "$out/h200_kda_gates_kernels.json" || return
    done
  done
}
step bench_kda_gates bench_kda_gates
step bench_boundary "$build/bench/bench_boundary" --json "$out/h200_boundary.json"
step bench_conv "$build/bench/bench_conv" --json "$out/h200_conv.json"
# The binding as built above: its extension sits in the build tree.
PYTHONPATH="$build/python" step anchors python3 bench/anchors.py --json "$out/h200_anchors.json"
PYTHONPATH="$build/python" step bench_python python3 bench/bench_python.py --json "$out/h200_python_host.json"
# The decode and verify grid; fla's arm where $SP_ANCHOR_DIR holds it (the
# driver stops when fla does not load, unless told --no-fla).
PYTHONPATH="$build/python" step bench_kda_decode python3 bench/kda_decode.py \
  $([ -n "${SP_ANCHOR_DIR:-}" ] || echo --no-fla) --json "$out/h200_kda_decode.json"
fi
if [[ $phases == *decide* ]]; then
# Each pair in one process's turn, order reversed, so that drift shows.
kda() { "$build/bench/bench_kda" "$@"; }
decide_every_gate() { # CHUNKED_EVERY_GATE: the every-gate build's own cost on K3's inputs
  local s e
  for s in "16384 96 1" "16384 32 1" "16384 16 1"; do
    for e in 0 1 1 0; do kda --shape $s $([ $e = 1 ] && echo --every-gate) --json "$out/decide_every_gate.json" || return; done
  done
}
decide_gate_parts() { # CHUNKED_EVERY_GATE: where the every-gate one-pass build's time goes
  # (the wgmma build: whole, each side alone, every chunk factored; K3 beside it)
  local s g p
  for s in "16384 96 1" "16384 32 1"; do
    for p in g g.v g.k g.k g.v g; do
      kda --kernels chunked --shape $s --probe $p --json "$out/decide_gate_parts.json" || return
    done
    for g in softplus log_decay; do
      for p in g g.v g.k g.f g.f g.k g.v g; do
        kda --kernels chunked --shape $s --probe $p --gate $g --json "$out/decide_gate_parts.json" || return
      done
    done
    for p in g g.f g.f g; do # the every-gate build on K3's inputs
      kda --kernels chunked --shape $s --probe $p --every-gate --json "$out/decide_gate_parts.json" || return
    done
  done
}
decide_longest_first() { # ONE_PASS_LONGEST_FIRST: each order forced, unequal and equal lengths
  local s l
  for s in "16384 96 8 --unequal" "16384 32 8 --unequal" "16384 96 32 --unequal" "8192 96 16 --unequal" \
           "4096 96 8 --unequal" "8192 32 4 --unequal" "16384 96 8" "16384 96 32" "2048 96 16"; do
    for l in 0 1 1 0; do
      kda --kernels chunked --shape $s $([ $l = 1 ] && echo --longest-first || echo --batch-order) \
        --json "$out/decide_longest_first.json" || return
    done
  done
}
decide_decode_rows() { # DECODE_ROWS_PER_WARP (the decode grid itself is bench_kda_decode)
  local r s
  for r in 16 32; do
    for s in "64 12 64" "64 96 64" "512 96 512"; do
      kda --shape $s --decode-rows $r --json "$out/decide_decode_rows.json" || return
      kda --shape $s --decode-rows $r --bf16-state --json "$out/decide_decode_rows.json" || return
    done
  done
}
decide_decode_stream() { # DECODE_STREAM: a decode step's stream form against a block a pair
  local s p pool ps
  for s in "64 12 64" "64 32 64" "256 12 256" "512 12 512" "64 96 64" "512 96 512"; do
    for pool in --bf16-state ""; do # P 1, 2, 4 too where the bf16 step misses its target
      ps="0 auto auto 0"; [ -n "$pool" ] && ps="0 1 2 4 auto auto 4 2 1 0"
      for p in $ps; do
        kda --kernels decode --shape $s $pool $([ $p != 0 ] && echo --decode-pairs $p) \
          --json "$out/decide_decode_stream.json" || return
      done
    done
  done
}
step decide_every_gate decide_every_gate
step decide_gate_parts decide_gate_parts
step decide_longest_first decide_longest_first
step decide_decode_rows decide_decode_rows
step decide_decode_stream decide_decode_stream
# The gate table and the unequal batches against the anchors (fla, the fork):
# bench/kda_anchors.py says what $SP_ANCHOR_DIR must hold.
if [ -n "${SP_ANCHOR_DIR:-}" ]; then
  PYTHONPATH="$build/python" step anchors_gates python3 bench/kda_anchors.py --arms stridepack,fla \
    --shapes gates --gates lower_bound,softplus,log_decay,log_decay_bf16 --json "$out/h200_kda_gates.json"
  PYTHONPATH="$build/python" step anchors_varlen python3 bench/kda_anchors.py --shapes varlen \
    --json "$out/h200_kda_varlen.json"
else
  summary+=("$(printf '%-28s skipped (no SP_ANCHOR_DIR)' anchors_gates)")
fi
fi

grep -hE "tests passed|tests failed|Not Run|\(Failed\)|Skipped" "$logs"/ctest*.log 2>/dev/null | tail -20
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$logs"/san_*.log 2>/dev/null | sort | uniq -c
tail -6 "$logs/demo.log" 2>/dev/null
for f in bench_kda bench_kda_gates bench_pack bench_boundary bench_conv anchors bench_python bench_kda_decode \
    decide_every_gate decide_gate_parts decide_longest_first decide_decode_rows decide_decode_stream \
    anchors_gates \
    anchors_varlen; do
  [ -f "$logs/$f.log" ] && { echo "== $f"; grep -vE '^\{' "$logs/$f.log" | tail -16; }
done
# The decisions' tables (medians of each arm, ratios), before the summary.
[[ $phases == *decide* ]] && python3 tools/perf_tables.py "$out" | sed -n '/CHUNKED_EVERY_GATE/,$p'
printf '%s\n' "${summary[@]}"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
echo "steps failed: $failed"
[ "$failed" -eq 0 ]
