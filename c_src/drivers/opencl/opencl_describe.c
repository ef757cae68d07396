/* Describing the OpenCL devices (opencl_describe.h): run by cascade_opencl_probe, or by the
 * driver itself where the helper cannot be run. */
#include "opencl_describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl.h>
/* the ICD loader's "no platform" code (cl_ext.h), without pulling the whole header in */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

static bool has_extension(cl_device_id id, const char *ext) {
    size_t len = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
        return false;
    char *s = malloc(len + 1);
    if (!s) return false;
    bool found = false;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, len, s, NULL) == CL_SUCCESS) {
        s[len] = 0;
        size_t n = strlen(ext);
        for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == s || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ');
    }
    free(s);
    return found;
}

static void describe(cl_device_id id, ocl_desc *d) {
    d->fp64 = has_extension(id, "cl_khr_fp64");
    d->fp16 = has_extension(id, "cl_khr_fp16");
    size_t group = 1;
    cl_ulong alloc = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL) !=
        CL_SUCCESS)
        group = 1;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL) != CL_SUCCESS)
        alloc = 0;
    d->max_group = group;
    d->max_alloc = alloc;

    cx_device_props *props = &d->props;
    char name[256] = "", version[256] = "";
    cl_device_type type = 0;
    cl_ulong mem = 0;
    clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetDeviceInfo(id, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
    clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    /* precision bounds say outright that long names are cut (gcc -O1 warns otherwise) */
    snprintf(props->name, sizeof props->name, "%.63s", name);
    /* "OpenCL 3.0 PoCL HSTR: ...": the standard, then the driver's own version */
    char *cut = version, driver[64] = "";
    clGetDeviceInfo(id, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
    for (int words = 0; *cut && words < 2; words++) {
        cut += strspn(cut, " ");
        cut += strcspn(cut, " ");
    }
    snprintf(cut, sizeof version - (size_t)(cut - version), ", driver %s", driver);
    snprintf(props->kind, sizeof props->kind, "%s",
             type & CL_DEVICE_TYPE_GPU           ? "gpu"
             : type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                                 : "cpu");
    props->memory = (long long)mem;
    props->host_memory = false;
    snprintf(props->detail, sizeof props->detail,
             "%.40s; f16/bf16 stored, computed in f32%s; %s; %s", version,
             d->fp16 ? "" : " (no cl_khr_fp16)", d->fp64 ? "f64 native" : "no f64 (no cl_khr_fp64)",
#ifdef CX_HAVE_CLBLAST
             "dot by CLBlast (f32, f64)"
#else
             "no dot (built without CLBlast)"
#endif
    );
}

cx_code ocl_describe_all(ocl_desc *out, int *count, cx_status *st) {
    cl_uint np = 0;
    cl_platform_id platforms[OCL_MAX_DEVICES];
    *count = 0;
    cl_int err = clGetPlatformIDs(OCL_MAX_DEVICES, platforms, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0))
        return cx_fail(st, CX_EDEVICE,
                       "opencl: no OpenCL platform (the ICD loader found no driver in "
                       "/etc/OpenCL/vendors; pocl-opencl-icd gives one on any CPU)");
    if (err != CL_SUCCESS)
        return cx_fail(st, CX_EDEVICE, "opencl: clGetPlatformIDs failed (OpenCL error %d)",
                       (int)err);
    if (np > OCL_MAX_DEVICES) np = OCL_MAX_DEVICES;
    int n = 0;
    for (cl_uint p = 0; p < np && n < OCL_MAX_DEVICES; p++) {
        cl_uint nd = 0;
        cl_device_id ids[OCL_MAX_DEVICES];
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, ids, &nd) !=
            CL_SUCCESS)
            continue;
        for (cl_uint k = 0; k < nd && n < OCL_MAX_DEVICES; k++) {
            memset(&out[n], 0, sizeof out[n]);
            out[n].platform = (int)p;
            out[n].index = (int)k;
            describe(ids[k], &out[n]);
            n++;
        }
    }
    if (n == 0) return cx_fail(st, CX_EDEVICE, "opencl: %u OpenCL platform(s) but no device", np);
    *count = n;
    return CX_OK;
}
