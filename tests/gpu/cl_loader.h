/*
 * cl_loader.h — the OpenCL host API for a test that drives the device-memory mode
 * (mamba2_context_create_opencl) itself: the entry points src/opencl/cl_api.h declares, looked
 * up in the ICD loader with dlopen, so the test builds without OpenCL headers or libraries,
 * as the library does.
 */
#ifndef MAMBA2C_TEST_CL_LOADER_H
#define MAMBA2C_TEST_CL_LOADER_H

#include <dlfcn.h>

#include "opencl/cl_api.h"

typedef struct tcl {
#define TCL_X(ret, name, args) ret(*name) args;
    M2CL_FUNCS(TCL_X)
#undef TCL_X
} tcl;

/* 1 when every entry point was found. */
static inline int tcl_load(tcl *t) {
    void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
#define TCL_X(ret, name, args)                                                                 \
    *(void **)&t->name = dlsym(h, #name);                                                      \
    if (!t->name) return 0;
    M2CL_FUNCS(TCL_X)
#undef TCL_X
    return 1;
}

#endif /* MAMBA2C_TEST_CL_LOADER_H */
