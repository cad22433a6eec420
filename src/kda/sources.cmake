# KDA consumer and input boundary sources, relative to src/.
set(SP_KDA_C_SOURCES)
set(SP_KDA_CUDA_SOURCES)
