/*
 * device.h — the one table of what each CUDA device offers the library's
 * kernels: its multiprocessors, the shared memory a block may opt into,
 * cooperative launch, which builds of the KDA kernels have code for it, and
 * how many blocks of each occupancy-planned kernel a multiprocessor holds.
 * Asked of the runtime once per device and part, on first use, under one
 * lock; read by the KDA plan (plan.c) and the launchers. Nothing else in the
 * library caches a device fact. A kernel family's part is asked only when
 * that family is first used (asking about a kernel loads its code onto the
 * device: a KDA-only program never loads the convolution's).
 *
 * Plain C, no CUDA types: the plan (C) reads it too. CUDA builds fill it
 * (device.cu); a build without CUDA answers SP_ERR_NO_DEVICE (none.c).
 */
#ifndef SP_CUDA_DEVICE_H
#define SP_CUDA_DEVICE_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices the table has rows for; a higher ordinal is refused. */
#define SP_CUDA_MAX_DEVICES 64
/* The convolution's kernel instances (conv/conv.cu numbers them). */
#define SP_CONV_KERNELS 18

typedef struct sp_cuda_device {
    int sms;         /* multiprocessors */
    int smem_optin;  /* bytes of shared memory a block may opt into */
    int cooperative; /* 1: cooperative launches (every block resident at once) */
    /* KDA (kda/cuda/, filled by sp_kda_cuda_device_facts_): */
    int kda_chunked;         /* 1: a block gets the shared memory the chunked kernels need */
    int kda_wgmma;           /* 1: the one-pass kernel's wgmma build is wgmma code here (sm_90a) */
    int kda_fused_per_sm[2][2]; /* blocks a multiprocessor holds of the two-pass kernel's
                                   one-kernel form, [every-gate build][records in flight 2 (0)
                                   or 4 (1)]; 0: not here */
    int kda_decode_stream_per_sm[2]; /* blocks a multiprocessor holds of the decode kernel's
                                        stream form, [bf16 pool]; 0: no code for it here
                                        (bulk copies) */
    /* The convolution (conv/, filled by sp_conv_cuda_device_facts_): */
    int conv_per_sm[SP_CONV_KERNELS]; /* blocks a multiprocessor holds, per instance */
} sp_cuda_device;

/* The parts of a row beyond the device's attributes (always filled). */
enum { SP_CUDA_PART_KDA = 1, SP_CUDA_PART_CONV = 2 };

/* The table's row of CUDA device `device`, with its attributes and the
 * `parts` asked for, each filled on its first use (the runtime is asked with
 * `device` current; the caller's device is given back). Thread-safe; later
 * calls read the row without a runtime call.
 * @return SP_OK and *info; SP_ERR_NO_DEVICE when the process has no such
 *         device (or the build no CUDA); SP_ERR_CUDA when the runtime fails
 *         (what failed is asked again next time). */
sp_status sp_cuda_device_(int device, unsigned parts, const sp_cuda_device **info);

/* The kernel families' parts of a row, with the row's device current and
 * its attributes (sms, smem_optin, cooperative) already filled: each asks
 * the runtime about its own kernels only. CUDA builds only. */
sp_status sp_kda_cuda_device_facts_(sp_cuda_device *d);
sp_status sp_conv_cuda_device_facts_(sp_cuda_device *d);

#ifdef __cplusplus
}
#endif

#endif /* SP_CUDA_DEVICE_H */
