/* line.c — the line builder (see line.h): vsnprintf into what is left of
 * the buffer, the length clamped to it, so a cut piece never moves the
 * end past the buffer. */
#include "srconfig.h"

#include "line.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

sr_line sr_line_on(char *buf, size_t size) {
    if (size)
        buf[0] = '\0';
    return (sr_line){.buf = buf, .size = size};
}

void sr_line_vadd(sr_line *l, const char *fmt, va_list ap) {
    if (l->len + 1 >= l->size) {
        l->cut = l->cut || *fmt;
        return;
    }
    size_t room = l->size - l->len;
    int n = vsnprintf(l->buf + l->len, room, fmt, ap);
    if (n < 0) {
        l->buf[l->len] = '\0';
        l->cut = true;
    } else if ((size_t)n >= room) {
        l->len = l->size - 1;
        l->cut = true;
    } else {
        l->len += (size_t)n;
    }
}

void sr_line_add(sr_line *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sr_line_vadd(l, fmt, ap);
    va_end(ap);
}

void sr_line_item(sr_line *l, const char *sep, const char *fmt, ...) {
    if (l->len)
        sr_line_add(l, "%s", sep);
    va_list ap;
    va_start(ap, fmt);
    sr_line_vadd(l, fmt, ap);
    va_end(ap);
}
