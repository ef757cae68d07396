#include "status.h"

#include <stdarg.h>
#include <stdio.h>

cx_code cx_fail(cx_status *st, cx_code code, const char *fmt, ...) {
    if (st) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->message, sizeof st->message, fmt, ap);
        va_end(ap);
        st->code = code;
    }
    return code;
}

const char *cx_code_name(cx_code code) {
    switch (code) {
    case CX_OK: return "ok";
    case CX_EINVAL: return "invalid_argument";
    case CX_EFREED: return "freed";
    case CX_ENOMEM: return "out_of_memory";
    case CX_EUNSUPPORTED: return "unsupported";
    case CX_EDEVICE: return "device_error";
    }
    return "unknown";
}
