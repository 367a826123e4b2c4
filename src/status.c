/* status.c — status table, the per-thread error message, sticky errors of
 * background threads, and log lines.  See status.h for the contract. */
#include "srconfig.h"

#include "status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const struct {
    int code;
    const char *msg;
} status_table[] = {
#define SR_STATUS_ROW(name, code, msg) {code, msg},
    SR_STATUS_TABLE(SR_STATUS_ROW)
#undef SR_STATUS_ROW
};

static _Thread_local char error_buf[4096];
static int process_rank = 0, process_world = 1;
/* a thread of a virtual rank says its own rank (sr_log_bind_rank) */
static _Thread_local int thread_rank = -1, thread_world = 1;
#define log_rank (thread_rank >= 0 ? thread_rank : process_rank)
#define log_world (thread_rank >= 0 ? thread_world : process_world)

int sr_status_exit_code(sr_status st) {
    if ((int)st < 0 || st >= SR_STATUS_COUNT)
        return 70;
    return status_table[st].code;
}

const char *sr_status_str(sr_status st) {
    if ((int)st < 0 || st >= SR_STATUS_COUNT)
        return "unknown status";
    return status_table[st].msg;
}

sr_status sr_error(sr_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_buf, sizeof error_buf, fmt, ap);
    va_end(ap);
    return st;
}

sr_status sr_error_wrap(sr_status st, const char *fmt, ...) {
    char ctx[1024], old[sizeof error_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, error_buf, sizeof old);
    if (old[0])
        sr_fmt(error_buf, sizeof error_buf, "%s: %s", ctx, old);
    else
        sr_fmt(error_buf, sizeof error_buf, "%s", ctx);
    return st;
}

void sr_fmt(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

void sr_hex(const void *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

sr_status sr_error_oom(const char *what) { return sr_error(SR_ERR_INTERNAL, "out of memory (%s)", what); }

const char *sr_error_message(void) { return error_buf; }

static void (*error_printer)(sr_status);
static bool error_emitted;

void sr_error_set_printer(void (*printer)(sr_status st)) { error_printer = printer; }

void sr_error_emit(sr_status st) {
    if (!error_printer || error_emitted || st == SR_OK)
        return;
    error_emitted = true;
    error_printer(st);
    fflush(NULL);
}

bool sr_error_emitted(void) { return error_emitted; }

/* 0: no final message yet; 1: claimed, being printed; 2: printed. */
static atomic_int final_state;

bool sr_error_final_claim(void) {
    int none = 0;
    if (atomic_compare_exchange_strong(&final_state, &none, 1))
        return true;
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 200 && atomic_load(&final_state) != 2; i++)
        nanosleep(&tick, NULL);
    return false;
}

void sr_error_final_done(void) {
    fflush(stderr);
    atomic_store(&final_state, 2);
}

void sr_sticky_init(sr_sticky *s) {
    pthread_mutex_init(&s->mu, NULL);
    s->st = SR_OK;
    s->msg[0] = '\0';
}

void sr_sticky_destroy(sr_sticky *s) { pthread_mutex_destroy(&s->mu); }

bool sr_sticky_set(sr_sticky *s, sr_status st, const char *fmt, ...) {
    bool first = false;
    pthread_mutex_lock(&s->mu);
    if (s->st == SR_OK && st != SR_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->msg, sizeof s->msg, fmt, ap);
        va_end(ap);
        s->st = st;
        first = true;
    }
    pthread_mutex_unlock(&s->mu);
    return first;
}

sr_status sr_sticky_status(sr_sticky *s) {
    pthread_mutex_lock(&s->mu);
    sr_status st = s->st;
    pthread_mutex_unlock(&s->mu);
    return st;
}

sr_status sr_sticky_raise(sr_sticky *s) {
    pthread_mutex_lock(&s->mu);
    sr_status st = s->st;
    if (st != SR_OK)
        snprintf(error_buf, sizeof error_buf, "%s", s->msg);
    pthread_mutex_unlock(&s->mu);
    return st;
}

void sr_log_set_rank(int rank, int world_size) {
    process_rank = rank;
    process_world = world_size;
}

void sr_log_bind_rank(int rank, int world_size) {
    thread_rank = rank;
    thread_world = world_size;
}

int sr_log_rank(void) { return log_rank; }

static char log_tag[40];

void sr_log_set_tag(const char *tag) {
    if (tag && *tag)
        snprintf(log_tag, sizeof log_tag, "[%s] ", tag);
    else
        log_tag[0] = '\0';
}

static void log_line(const char *level, const char *fmt, va_list ap) {
    char line[8192];
    int n = 0;
    if (log_world > 1)
        n = snprintf(line, sizeof line, "shardrun[rank %d]: %s%s", log_rank, log_tag, level);
    else
        n = snprintf(line, sizeof line, "shardrun: %s%s", log_tag, level);
    if (n < 0 || (size_t)n >= sizeof line)
        n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One fputs per line so lines of different ranks do not interleave. */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
    fflush(stderr);
}

void sr_log_info(const char *fmt, ...) {
    if (log_rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_line("", fmt, ap);
    va_end(ap);
}

void sr_log_info_all(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line("", fmt, ap);
    va_end(ap);
}

void sr_log_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line("warning: ", fmt, ap);
    va_end(ap);
}

void sr_log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line("error: ", fmt, ap);
    va_end(ap);
}

const char *sr_escape(const char *s, char *out, size_t n) {
    size_t used = 0;
    if (n == 0)
        return out;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char one[8];
        if (c < 0x20 || c == 0x7f || c == '\\')
            snprintf(one, sizeof one, c == '\n' ? "\\n" : c == '\\' ? "\\\\" : "\\x%02x", c);
        else
            one[0] = (char)c, one[1] = '\0';
        size_t k = strlen(one);
        if (used + k + 4 > n) {
            snprintf(out + used, n - used, "...");
            return out;
        }
        memcpy(out + used, one, k);
        used += k;
    }
    out[used] = '\0';
    return out;
}
