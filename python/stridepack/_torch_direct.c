/*
 * _torch_direct.c — see _torch_direct.h. Calls the C shim of the libtorch
 * already loaded in the process. The libraries are found by the symbols
 * they export, among the objects loaded already, whatever their file names
 * (nothing is loaded here, and a process without torch never gets this far).
 */
#define _GNU_SOURCE /* RTLD_NOLOAD, dl_iterate_phdr */
#include "_torch_direct.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

/* The shim's conventions: an AtenTensorHandle points at an at::Tensor, and
 * an at::Tensor is one pointer to its TensorImpl; every getter returns 0 on
 * success (AOTITorchError) and writes through its last argument. */
typedef void *td_handle;
typedef int32_t (*get_i64_fn)(td_handle, int64_t *);
typedef int32_t (*get_i32_fn)(td_handle, int32_t *);
typedef int32_t (*get_ptr_fn)(td_handle, void **);
typedef int32_t (*get_arr_fn)(td_handle, int64_t **);
typedef int32_t (*code_fn)(void);
typedef _Bool (*flag_fn)(void); /* C++ bool */
typedef int32_t (*stream_fn)(int32_t, void **);

static struct {
    int state; /* 0 not looked up, 1 usable, -1 not */
    get_i64_fn dim;
    get_arr_fn sizes, strides;
    get_ptr_fn data_ptr;
    get_i32_fn dtype, device_type, device_index, layout;
    code_fn dtype_code_fn[16];
    int32_t strided, cpu, cuda;
    flag_fn grad_enabled;
    stream_fn cuda_stream;
    void *lib;
} T;

static void *sym(void *lib, const char *name) { return lib ? dlsym(lib, name) : NULL; }

/* The loaded object that defines `name` itself (not one that only imports
 * it): a handle from dlopen(RTLD_NOLOAD), or NULL. */
typedef struct { const char *name; void *lib; } lib_search;

static int find_definer(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    lib_search *s = arg;
    if (!info->dlpi_name || !info->dlpi_name[0]) return 0; /* the executable */
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return 0;
    void *f = dlsym(h, s->name);
    Dl_info where;
    /* dlsym searches the object's dependencies too: keep the handle only
     * of the object the symbol lies in. */
    if (f && dladdr(f, &where) && where.dli_fname && !strcmp(where.dli_fname, info->dlpi_name)) {
        s->lib = h;
        return 1;
    }
    dlclose(h);
    return 0;
}

static void *loaded_library_with(const char *name) {
    lib_search s = {name, NULL};
    dl_iterate_phdr(find_definer, &s);
    return s.lib;
}

int td_load(void) {
    if (T.state) return T.state > 0;
    T.state = -1;
    T.lib = loaded_library_with("aoti_torch_get_dim");
    if (!T.lib) return 0;
    T.dim = (get_i64_fn)sym(T.lib, "aoti_torch_get_dim");
    T.sizes = (get_arr_fn)sym(T.lib, "aoti_torch_get_sizes");
    T.strides = (get_arr_fn)sym(T.lib, "aoti_torch_get_strides");
    T.data_ptr = (get_ptr_fn)sym(T.lib, "aoti_torch_get_data_ptr");
    T.dtype = (get_i32_fn)sym(T.lib, "aoti_torch_get_dtype");
    T.device_type = (get_i32_fn)sym(T.lib, "aoti_torch_get_device_type");
    T.device_index = (get_i32_fn)sym(T.lib, "aoti_torch_get_device_index");
    T.layout = (get_i32_fn)sym(T.lib, "aoti_torch_get_layout");
    code_fn strided = (code_fn)sym(T.lib, "aoti_torch_layout_strided");
    code_fn cpu = (code_fn)sym(T.lib, "aoti_torch_device_type_cpu");
    code_fn cuda = (code_fn)sym(T.lib, "aoti_torch_device_type_cuda");
    T.grad_enabled = (flag_fn)sym(T.lib, "aoti_torch_grad_mode_is_enabled");
    if (!T.dim || !T.sizes || !T.strides || !T.data_ptr || !T.dtype || !T.device_type ||
        !T.device_index || !T.layout || !strided || !cpu || !cuda)
        return 0;
    T.strided = strided();
    T.cpu = cpu();
    T.cuda = cuda();
    /* In libtorch_cuda, present only in CUDA builds of torch. */
    void *cuda_lib = loaded_library_with("aoti_torch_get_current_cuda_stream");
    T.cuda_stream = (stream_fn)sym(cuda_lib, "aoti_torch_get_current_cuda_stream");
    T.state = 1;
    return 1;
}

int td_describe(uintptr_t impl, td_meta *m) {
    void *tensor = (void *)impl; /* the at::Tensor: its one pointer */
    td_handle h = &tensor;
    int32_t layout = -1, type = -1;
    int64_t *sizes = NULL, *strides = NULL;
    void *data = NULL;
    if (T.layout(h, &layout) || layout != T.strided || T.dim(h, &m->ndim) ||
        T.sizes(h, &sizes) || T.strides(h, &strides) || T.dtype(h, &m->dtype) ||
        T.device_type(h, &type) || T.device_index(h, &m->device_index) || T.data_ptr(h, &data))
        return -1;
    m->sizes = sizes;
    m->strides = strides;
    m->data = (uintptr_t)data;
    m->device = type == T.cuda ? TD_CUDA : type == T.cpu ? TD_CPU : TD_OTHER;
    return 0;
}

int32_t td_dtype_code(const char *name) {
    char fn[64];
    snprintf(fn, sizeof fn, "aoti_torch_dtype_%s", name);
    code_fn f = (code_fn)sym(T.state > 0 ? T.lib : NULL, fn);
    return f ? f() : -1;
}

int td_grad_enabled(void) {
    if (T.state <= 0 || !T.grad_enabled) return -1;
    return T.grad_enabled() ? 1 : 0;
}

int td_cuda_stream(int ordinal, uintptr_t *stream) {
    void *s = NULL;
    if (T.state <= 0 || !T.cuda_stream || T.cuda_stream((int32_t)ordinal, &s)) return -1;
    *stream = (uintptr_t)s;
    return 0;
}
