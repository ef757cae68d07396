/* Errors in the core: a code and a message that names the expected and the given. */
#ifndef CX_STATUS_H
#define CX_STATUS_H

#include <stddef.h>

typedef enum {
    CX_OK = 0,
    CX_EINVAL,       /* programmer error: bad shape, type, axis, option value */
    CX_EFREED,       /* the tensor was released with free/1 */
    CX_ENOMEM,       /* the device could not allocate */
    CX_EUNSUPPORTED, /* no route can run this op */
    CX_EDEVICE,      /* driver or device failure */
} cx_code;

typedef struct {
    cx_code code;
    char message[512];
} cx_status;

/* Makes `st` a fresh status by setting only its code and the message's first byte: an
 * initialiser such as {CX_OK, ""} clears all 512 bytes, which showed in the profile of a loop
 * of one-element adds. */
#define CX_STATUS_RESET(st) ((st).code = CX_OK, (st).message[0] = 0)

/* Sets code and a printf-formatted message; returns the code so callers can `return cx_fail(...)`.
 */
cx_code cx_fail(cx_status *st, cx_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *cx_code_name(cx_code code);

/* A failure on `device` reported as that device's: the host kernels (the cpu driver's, which
 * the blas driver runs too, with its allocator) begin their messages with "cpu: ", and a user
 * who asked for blas must read "blas: could not allocate ...". Other messages are left alone. */
void cx_status_on_device(cx_status *st, const char *device);

#endif
