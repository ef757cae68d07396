/* What the opencl driver knows of a device before it starts it: enough to list the device, answer
 * capability questions and start it later (opencl_describe.c).
 *
 * Asking an OpenCL platform anything loads its ICD, and PoCL's brings LLVM and clang with it:
 * about 70 MB of resident memory in every BEAM that loads Cascade, whether or not it ever uses
 * the device. So the driver's probe runs cascade_opencl_probe (opencl_probe_main.c), a program
 * beside the driver that describes the devices and writes the descriptions back through a pipe;
 * the driver loads the platform itself only when a device is first used. A crash inside an
 * OpenCL driver while probing then takes down the helper, not the VM. */
#ifndef CX_OPENCL_DESCRIBE_H
#define CX_OPENCL_DESCRIBE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../core/driver.h"
#include "../../core/status.h"

#define OCL_MAX_DEVICES 16

typedef struct {
    int platform, index; /* the platform's number, the device's number within it */
    cx_device_props props;
    bool fp64, fp16;    /* cl_khr_fp64, cl_khr_fp16 */
    uint64_t max_group; /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    uint64_t max_alloc; /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
} ocl_desc;

/* What the helper writes: this header, then `count` descriptions; on failure count is 0 and
 * `code` and `message` say why. */
#define OCL_PROBE_MAGIC 0x43584f50u /* "CXOP" */
typedef struct {
    uint32_t magic, desc_size;
    int32_t count, code;
    char message[512]; /* as cx_status */
} ocl_probe_header;

/* Describes every device of every platform, in the ICD loader's order, in this process. */
cx_code ocl_describe_all(ocl_desc *out, int *count, cx_status *st);

#endif
