#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

void cx_status_on_device(cx_status *st, const char *device) {
    static const char host[] = "cpu: ";
    if (!st || !device || strcmp(device, "cpu") == 0 ||
        strncmp(st->message, host, sizeof host - 1) != 0)
        return;
    /* "cpu: rest" -> "<device>: rest", cut to the message's size */
    size_t cap = sizeof st->message - 1, dn = strnlen(device, cap - 2);
    size_t rest = strlen(st->message + 3); /* ": rest" */
    if (dn + rest > cap) rest = cap - dn;
    memmove(st->message + dn, st->message + 3, rest);
    memcpy(st->message, device, dn);
    st->message[dn + rest] = 0;
}
