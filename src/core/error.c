/*
 * error.c — status strings and the per-thread last-error message.
 *
 * Every failing entry point records a readable message here (m2_error) and returns its
 * status; the library itself never prints. The buffer is thread-local so concurrent
 * callers on different contexts do not overwrite each other's messages.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

static _Thread_local char m2_last_msg[1024];

mamba2_status_t m2_error(mamba2_status_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m2_last_msg, sizeof m2_last_msg, fmt, ap);
    va_end(ap);
    return st;
}

void m2_clear_error(void) { m2_last_msg[0] = '\0'; }

const char *mamba2_last_error(void) { return m2_last_msg; }

const char *mamba2_status_string(mamba2_status_t status) {
    switch (status) {
    case MAMBA2_STATUS_OK: return "ok";
    case MAMBA2_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case MAMBA2_STATUS_UNSUPPORTED: return "unsupported";
    case MAMBA2_STATUS_OUT_OF_MEMORY: return "out of memory";
    case MAMBA2_STATUS_WORKSPACE_TOO_SMALL: return "workspace too small";
    case MAMBA2_STATUS_BACKEND_UNAVAILABLE: return "backend unavailable";
    case MAMBA2_STATUS_INTERNAL_ERROR: return "internal error";
    case MAMBA2_STATUS_BUSY: return "context busy";
    }
    return "unknown status";
}

const char *mamba2_version_string(void) { return "0.1.0"; }
