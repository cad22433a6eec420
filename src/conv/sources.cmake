# Causal short convolution (the producer of q, k, v) sources, relative to src/.
set(SP_CONV_C_SOURCES
  conv/check.c      # the contract, entry points, dispatch by device
  conv/conv_cpu.c   # fp32 CPU convolution (OpenMP over sequence x channel block)
  conv/reference.c  # float64 reference
)
# The CUDA kernels' threads are headers (conv_kernels.cuh, conv_prefill.cuh,
# conv_decode.cuh), compiled for the device by conv.cu, for the host by
# conv_emulate.cu.
set(SP_CONV_CUDA_SOURCES
  conv/conv.cu          # CUDA prefill and decode: parameters, work items, one launch
  conv/conv_emulate.cu  # the kernels' threads run on the host, for tests
)
