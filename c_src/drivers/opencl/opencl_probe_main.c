/* cascade_opencl_probe: describes the OpenCL devices on standard output for the opencl driver's
 * probe (opencl_describe.h), as an ocl_probe_header followed by the descriptions. Built and
 * installed beside the driver; it takes no arguments and is not meant to be run by hand. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "opencl_describe.h"

static int write_all(const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, c, n);
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(void) {
    static ocl_desc descs[OCL_MAX_DEVICES];
    cx_status st = {CX_OK, ""};
    int n = 0;
    ocl_probe_header h = {.magic = OCL_PROBE_MAGIC, .desc_size = sizeof(ocl_desc)};
    h.code = ocl_describe_all(descs, &n, &st);
    h.count = n;
    snprintf(h.message, sizeof h.message, "%s", st.message);
    if (write_all(&h, sizeof h) || write_all(descs, sizeof(ocl_desc) * (size_t)n)) return 1;
    return 0;
}
