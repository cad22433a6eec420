# KDA consumer and input boundary sources, relative to src/.
set(SP_KDA_C_SOURCES
  kda/check.c        # the prefill contract, shared with the boundary
  kda/prefill.c      # public entry points, dispatch by device
  kda/prefill_cpu.c  # fp32 CPU prefill (OpenMP over sequence x head)
  kda/reference.c    # float64 reference
  kda/boundary.c     # input boundary: check, one sp_pack, prefill
)
set(SP_KDA_CUDA_SOURCES
  kda/prefill.cu     # CUDA prefill, one block per (sequence, head)
  kda/runtime.cu     # the few runtime calls the boundary needs
)
if(NOT SP_HAVE_CUDA)
  # Stubs returning SP_ERR_NO_DEVICE, so a CPU-only build links.
  list(APPEND SP_KDA_C_SOURCES kda/nocuda.c)
endif()
