/* line.h — the one line builder: a line grown piece by piece (printf
 * pieces) in a caller's bounded buffer, always NUL-terminated, a piece
 * that does not fit cut and remembered (Redis's sds, without the heap:
 * every line the program builds has a bound).  It replaces the
 * `used += snprintf(buf + used, ...)` idiom, whose count runs past the
 * buffer when a piece is cut (tests/layers.sh finds none outside line.c). */
#ifndef SR_LINE_H
#define SR_LINE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *buf;
    size_t size; /* of buf */
    size_t len;  /* characters in buf (< size) */
    bool cut;    /* a piece did not fit whole */
} sr_line;

/* An empty line over buf[size] (size >= 1; buf[0] becomes NUL). */
sr_line sr_line_on(char *buf, size_t size);
/* An empty line over the array `arr`. */
#define SR_LINE(arr) sr_line_on((arr), sizeof(arr))
/* Appends printf(fmt, ...): what fits, the rest cut (l->cut set). */
void sr_line_add(sr_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sr_line_add with a va_list. */
void sr_line_vadd(sr_line *l, const char *fmt, va_list ap);
/* Appends `sep` unless the line is empty, then printf(fmt, ...): one item
 * of a list ("a, b, c"). */
void sr_line_item(sr_line *l, const char *sep, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
