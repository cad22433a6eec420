# KDA consumer and input boundary sources, relative to src/.
set(SP_KDA_C_SOURCES
  kda/check.c        # the prefill contract, shared with the boundary
  kda/plan.c         # how a call runs: its kernel and launch configuration (the only place that decides)
  kda/prefill.c      # public entry points, dispatch by device
  kda/prefill_cpu.c  # fp32 CPU prefill (OpenMP over sequence x head)
  kda/reference.c    # float64 reference
  kda/boundary.c     # input boundary: check, one sp_pack, prefill
  kda/inputs.c       # the inputs boundary alone, for other KDA kernels
)
set(SP_KDA_CUDA_SOURCES
  kda/cuda/prefill.cu    # CUDA entry: parameters, the chosen kernel's launch
  kda/cuda/recurrent.cu  # token-by-token kernel, one block per (sequence, head)
  kda/cuda/chunked.cu    # chunked kernel on tensor cores, one pass
  kda/cuda/chunked_two_pass.cu  # the same in two kernels, for few (sequence, head) pairs
  kda/cuda/decode.cu     # few tokens a sequence, a block per (sequence, head) pair (phases: decode.cuh)
  kda/cuda/decode_emulate.cu  # the decode kernel's warps on the host, lane by lane (tests)
  kda/cuda/chunk_emulate.cu  # the chunked kernels' K side for one chunk, on the host (tests)
)
# The one-pass kernel moves registers between its warpgroups (setmaxnreg):
# its Hopper code is sm_90a (cmake/cuda_arch.cmake).
set_source_files_properties(kda/cuda/chunked.cu PROPERTIES SP_CUDA_SM90A ON)
# The K side's shared-memory loads and stores reinterpret their arrays (bf16
# pairs as 32-bit words, fp32 sums over the bf16 operands): on the host, for
# the emulation, without the strict-aliasing assumption.
set_source_files_properties(kda/cuda/chunk_emulate.cu PROPERTIES
  COMPILE_OPTIONS "-Xcompiler=-fno-strict-aliasing")
