/* device_check.c — the device checks every entry makes (sp_copy_batch,
 * sp_pack, the contracts, the KDA and convolution boundaries): one rule and
 * one message for a tensor on the wrong device, and the refusal of a CUDA
 * device that this build or machine cannot use. */
#include "internal.h"

#include <stdio.h>

static int same_device(sp_device a, sp_device b) {
    return a.type == b.type && (a.type == SP_DEVICE_CPU || a.ordinal == b.ordinal);
}

static const char *device_text(sp_device d, char *buf, size_t n) {
    if (d.type == SP_DEVICE_CPU) snprintf(buf, n, "cpu");
    else if (d.type == SP_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", (int)d.ordinal);
    else snprintf(buf, n, "device type %d", (int)d.type);
    return buf;
}

sp_status sp_check_device_(const sp_tensor *t, sp_device want, const char *name,
                           const char *where) {
    char a[32], b[32];
    SP_REQUIRE(same_device(t->device, want), SP_ERR_DEVICE_MISMATCH, "%s: on %s, %s %s", name,
               device_text(t->device, a, sizeof a), where, device_text(want, b, sizeof b));
    return SP_OK;
}

sp_status sp_check_same_device_(const sp_tensor *t, sp_device want, const char *name) {
    return sp_check_device_(t, want, name, "other tensors are on");
}

sp_status sp_check_device_usable_(sp_device dev) {
    if (dev.type == SP_DEVICE_CUDA)
        SP_REQUIRE(sp_cuda_available(), SP_ERR_NO_DEVICE,
                   "cuda:%d: this build has no CUDA backend or no CUDA device is usable",
                   (int)dev.ordinal);
    return SP_OK;
}
