/*
 * device.cu — the device table (device.h): each row asked of the runtime
 * once, with its device current, then read without a runtime call.
 */
#include "cuda/device.h"
#include "cuda/runtime.h"

#include <pthread.h>

/* A row's parts filled so far: BASE (the attributes) and SP_CUDA_PART_*. */
enum { BASE = 4 };

static struct {
    pthread_mutex_t lock;            /* taken to fill a row's parts */
    unsigned ready[SP_CUDA_MAX_DEVICES]; /* parts filled (atomic) */
    sp_cuda_device row[SP_CUDA_MAX_DEVICES];
} table = {PTHREAD_MUTEX_INITIALIZER, {0}, {}};

/* The parts `want` that d lacks (have), with its device current. */
static sp_status fill(int device, unsigned have, unsigned want, sp_cuda_device *d) {
    if (!(have & BASE)) {
        SP_CUDA_CHECK(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, device));
        SP_CUDA_CHECK(cudaDeviceGetAttribute(&d->smem_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        SP_CUDA_CHECK(
            cudaDeviceGetAttribute(&d->cooperative, cudaDevAttrCooperativeLaunch, device));
    }
    if (want & ~have & SP_CUDA_PART_KDA) SP_FORWARD(sp_kda_cuda_device_facts_(d));
    if (want & ~have & SP_CUDA_PART_CONV) SP_FORWARD(sp_conv_cuda_device_facts_(d));
    return SP_OK;
}

extern "C" sp_status sp_cuda_device_(int device, unsigned parts, const sp_cuda_device **info) {
    *info = NULL;
    SP_REQUIRE(device >= 0 && device < SP_CUDA_MAX_DEVICES, SP_ERR_NO_DEVICE,
               "cuda:%d: stridepack serves devices 0 to %d", device, SP_CUDA_MAX_DEVICES - 1);
    const unsigned want = parts | BASE;
    if ((__atomic_load_n(&table.ready[device], __ATOMIC_ACQUIRE) & want) != want) {
        pthread_mutex_lock(&table.lock);
        const unsigned have = table.ready[device];
        sp_status s = SP_OK;
        if ((have & want) != want) {
            /* Filled in place: a part's fields are written only before its
             * bit is published, and read only after. */
            sp_cuda_device_guard g;
            s = sp_cuda_device_enter_(&g, device, "device");
            if (s == SP_OK)
                s = sp_cuda_device_leave_(&g, fill(device, have, want, &table.row[device]));
            if (s == SP_OK) __atomic_store_n(&table.ready[device], have | want, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&table.lock);
        SP_FORWARD(s);
    }
    *info = &table.row[device];
    return SP_OK;
}
