/*
 * _native.c — the CPython extension over libstridepack (linked in
 * statically), the module stridepack._native: its method table, the small
 * queries and test switches, and init. The work is in the files that
 * _binding.h lists: readers, layout, the copy and pack calls, the KDA calls.
 *
 * Build: python/CMakeLists.txt (by ctest's build and by the wheel backend).
 */
#include "_binding.h"

/* ---- small queries ---------------------------------------------------------- */

static PyObject *py_version(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyUnicode_FromString(sp_version());
}
static PyObject *py_status_string(PyObject *self, PyObject *code) {
    (void)self;
    long c = PyLong_AsLong(code);
    if (c == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(sp_status_string((sp_status)c));
}
static PyObject *py_cuda_available(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyBool_FromLong(sp_cuda_available());
}
static PyObject *py_copy_pass_count(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyLong_FromUnsignedLongLong(sp_copy_pass_count());
}
/* The optional `on` of the test switches below: -1 error, 0 False, 1 True,
 * 2 not given; torch is looked up first. */
static int switch_arg(PyObject *args) {
    PyObject *on = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &on)) return -1;
    if (!torch_tensor && init_torch() < 0) return -1;
    return on == Py_None ? 2 : PyObject_IsTrue(on);
}

/* direct_reads(on=None) -> whether torch tensors are read through the C
 * shim; on=False/True turns that off, or back on where the probe check
 * passed (for tests that compare both ways). */
static PyObject *py_direct_reads(PyObject *self, PyObject *args) {
    (void)self;
    const int on = switch_arg(args);
    if (on < 0) return NULL;
    if (on < 2) direct = on && direct_ok;
    return PyBool_FromLong(direct);
}

static PyObject *py_configure(PyObject *self, PyObject *fws) {
    (void)self;
    if (!PyList_Check(fws) || PyList_GET_SIZE(fws) != FW_COUNT)
        return PyErr_Format(PyExc_TypeError, "configure takes a list of %d frameworks", FW_COUNT);
    Py_INCREF(fws);
    Py_XSETREF(frameworks, fws);
    Py_RETURN_NONE;
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, PyDoc_STR(doc)}
static PyMethodDef methods[] = {
    METH("pack", py_pack, METH_VARARGS, "pack(tensors, workspace=None) -> list"),
    METH("pack_into", py_pack_into, METH_VARARGS, "pack_into(inputs, outputs)"),
    METH("copy_batch", py_copy_batch, METH_VARARGS, "copy_batch(pairs)"),
    METH("workspace_bytes", py_workspace_bytes, METH_O, "workspace_bytes(tensors) -> int"),
    METH("readable", py_readable, METH_O, "readable(x) -> None or the reason it is not"),
    METH("describe", py_describe, METH_VARARGS, "describe(x, via_dlpack=False) -> the view read"),
    METH("kda_prefill", py_kda_prefill, METH_VARARGS,
         "kda_prefill(arrays, gate, lower_bound, scale, interval, kernel, workspace)"),
    METH("kda_reference", py_kda_reference, METH_VARARGS,
         "kda_reference(arrays, gate, lower_bound, scale, interval)"),
    METH("kda_boundary_run", py_kda_boundary_run, METH_VARARGS,
         "kda_boundary_run(boundary, arrays, gate, lower_bound, scale, interval, kernel, "
         "workspace)"),
    METH("kda_reads_in_place", py_kda_reads_in_place, METH_O,
         "kda_reads_in_place(x) -> bool: the prefill reads this q, k, v or g where it lies"),
    METH("kda_workspace_bytes", py_kda_workspace_bytes, METH_VARARGS,
         "kda_workspace_bytes(arrays, gate, lower_bound, scale, interval) -> int"),
    METH("kda_available", py_kda_available, METH_NOARGS,
         "kda_available() -> whether the library's KDA prefill runs (one CPU token, tried once)"),
    METH("kda_kernel_name", py_kda_kernel_name, METH_O, "sp_kda_kernel_name(k)"),
    METH("conv", py_conv, METH_VARARGS,
         "conv(arrays, silu, decode, reference): sp_conv_prefill / sp_conv_decode (reference: "
         "their float64 references)"),
    METH("boundary_create", py_boundary_create, METH_VARARGS, "boundary_create(device, T, H)"),
    METH("boundary_close", py_boundary_close, METH_O, "boundary_close(capsule)"),
    METH("boundary_last_copied", py_boundary_last_copied, METH_O, "boundary_last_copied(capsule)"),
    METH("kda_inputs_workspace_bytes", py_kda_inputs_workspace_bytes, METH_VARARGS,
         "sp_kda_inputs_workspace_bytes(max_tokens, max_heads)"),
    METH("kda_inputs_create", py_kda_inputs_create, METH_VARARGS,
         "kda_inputs_create(device, max_tokens, max_heads, workspace)"),
    METH("kda_inputs_close", py_kda_inputs_close, METH_O, "kda_inputs_close(capsule)"),
    METH("kda_inputs_pack", py_kda_inputs_pack, METH_VARARGS,
         "kda_inputs_pack(capsule, (q, k, v, g, beta), workspace) -> list"),
    METH("version", py_version, METH_NOARGS, "sp_version() of the linked library"),
    METH("status_string", py_status_string, METH_O, "sp_status_string(code)"),
    METH("cuda_available", py_cuda_available, METH_NOARGS, "sp_cuda_available()"),
    METH("copy_pass_count", py_copy_pass_count, METH_NOARGS, "sp_copy_pass_count()"),
    METH("configure", py_configure, METH_O, "configure(frameworks): the framework hooks"),
    METH("direct_reads", py_direct_reads, METH_VARARGS,
         "direct_reads(on=None) -> whether torch tensors are read through torch's C shim"),
    {NULL, NULL, 0, NULL}};

static PyMethodDef cache_drop_def = METH("_cache_drop", cache_drop, METH_O, "weakref callback");

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "stridepack._native",
    .m_doc = "stridepack's CPython extension over libstridepack", .m_size = -1,
    .m_methods = methods};

#define STR_(x) #x
#define STR(x) STR_(x)

PyMODINIT_FUNC PyInit__native(void) {
    if (readers_init() < 0) return NULL;
    PyObject *errors = PyImport_ImportModule("stridepack._errors");
    if (!errors) return NULL;
    error_for = PyObject_GetAttrString(errors, "error");
    Py_DECREF(errors);
    if (!error_for) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Fallback = PyErr_NewExceptionWithDoc(
        "stridepack._native.Fallback",
        "Raised with (kind, index, reason) when the call needs the framework's own copy; "
        "nothing was written.", NULL, NULL);
    cache_drop_fn = PyCFunction_New(&cache_drop_def, NULL);
    if (!Fallback || !cache_drop_fn || PyModule_AddObject(m, "Fallback", Fallback) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(Fallback);
    /* The header this module was compiled against: the package checks it
     * against the library actually linked (sp_version()). */
    PyModule_AddStringConstant(m, "HEADER_VERSION",
                               STR(SP_VERSION_MAJOR) "." STR(SP_VERSION_MINOR) "." STR(SP_VERSION_PATCH));
    PyModule_AddIntConstant(m, "MAX_DIMS", SP_MAX_DIMS);
    PyModule_AddIntConstant(m, "PACK_ALIGN", SP_PACK_ALIGN);
    PyModule_AddIntConstant(m, "MAX_PAIRS_PER_LAUNCH", SP_MAX_PAIRS_PER_LAUNCH);
    /* sp_kda_gate and sp_kda_kernel, from the header: the package's tables
     * are built from these (and sp_kda_kernel_name), never typed in twice. */
    PyModule_AddIntConstant(m, "KDA_GATE_LOWER_BOUND", SP_KDA_GATE_LOWER_BOUND);
    PyModule_AddIntConstant(m, "KDA_GATE_SOFTPLUS", SP_KDA_GATE_SOFTPLUS);
    PyModule_AddIntConstant(m, "KDA_GATE_LOG_DECAY", SP_KDA_GATE_LOG_DECAY);
    PyModule_AddIntConstant(m, "KDA_BETA_LOGITS", SP_KDA_BETA_LOGITS);
    PyModule_AddIntConstant(m, "KDA_BETA_LOGITS_X2", SP_KDA_BETA_LOGITS_X2);
    PyModule_AddIntConstant(m, "KDA_BETA_ACTIVATED", SP_KDA_BETA_ACTIVATED);
    PyModule_AddIntConstant(m, "KDA_KERNEL_AUTO", SP_KDA_KERNEL_AUTO);
    PyModule_AddIntConstant(m, "KDA_KERNEL_RECURRENT", SP_KDA_KERNEL_RECURRENT);
    PyModule_AddIntConstant(m, "KDA_KERNEL_CHUNKED", SP_KDA_KERNEL_CHUNKED);
    PyModule_AddIntConstant(m, "KDA_KERNEL_CHUNKED_TWO_PASS", SP_KDA_KERNEL_CHUNKED_TWO_PASS);
    PyModule_AddIntConstant(m, "KDA_KERNEL_DECODE", SP_KDA_KERNEL_DECODE);
    return m;
}
