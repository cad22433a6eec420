#!/usr/bin/env bash
# Nsight Compute on the first COUNT launches of the kernels matching REGEX in
# a command (a benchmark, usually): the sections that say what bounds a
# kernel (speed of light, memory, warp stalls, scheduler, occupancy), as
# text in OUTDIR/NAME.txt. Needs ncu and a GPU.
#   tools/profile.sh OUTDIR NAME REGEX COUNT CMD...
set -euo pipefail
out=${1:?usage: tools/profile.sh OUTDIR NAME REGEX COUNT CMD...}
name=$2 regex=$3 count=$4
shift 4
mkdir -p "$out"
ncu=${CUDA_HOME:-/usr/local/cuda}/bin/ncu
"$ncu" --kernel-name "regex:$regex" --launch-count "$count" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
  --print-details all \
  "$@" >"$out/$name.txt" 2>&1
