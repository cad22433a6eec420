# Causal short convolution (the producer of q, k, v) sources, relative to src/.
set(SP_CONV_C_SOURCES
  conv/check.c      # the contract, entry points, dispatch by device
  conv/conv_cpu.c   # fp32 CPU convolution (OpenMP over sequence x channel block)
  conv/reference.c  # float64 reference
)
set(SP_CONV_CUDA_SOURCES
  conv/conv.cu      # CUDA prefill and decode, one launch
)
