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

/* 0: no final message yet; 1: claimed, being printed; 2: printed.  The
 * claiming thread's lines are the last: another thread's (a step's log
 * line while a witness ends the process) are dropped from then on. */
static atomic_int final_state;
static _Thread_local bool final_mine;

bool sr_error_final_claim(void) {
    int none = 0;
    if (atomic_compare_exchange_strong(&final_state, &none, 1)) {
        final_mine = true;
        return true;
    }
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 2000 && atomic_load(&final_state) != 2; i++) /* 20 s: fail_plane's abort and post-mortem */
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

static bool log_verbose;

void sr_log_set_verbose(bool on) { log_verbose = on; }

bool sr_log_verbose(void) { return log_verbose; }

static char log_tag[40];

void sr_log_set_tag(const char *tag) {
    if (tag && *tag)
        snprintf(log_tag, sizeof log_tag, "[%s] ", tag);
    else
        log_tag[0] = '\0';
}

/* The width of the progress line on the terminal (0: none shown). */
static atomic_int progress_width;

/* Blanks the progress line, so the next line starts at column 0. */
static void progress_clear(void) {
    int w = atomic_exchange(&progress_width, 0);
    if (w > 0)
        fprintf(stderr, "\r%*s\r", w, "");
}

/* Whether this thread may still write a line: not after another thread
 * claimed the final message. */
static bool may_log(void) { return final_mine || atomic_load(&final_state) == 0; }

void sr_log_progress(const char *fmt, ...) {
    if (!may_log())
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "\rshardrun: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    int w = (int)strlen(line) - 1, old = atomic_load(&progress_width);
    fprintf(stderr, "%s%*s", line, old > w ? old - w : 0, ""); /* blanks the last one's tail */
    fflush(stderr);
    atomic_store(&progress_width, old > w ? old : w);
}

static void log_line(const char *level, const char *fmt, va_list ap) {
    if (!may_log())
        return;
    progress_clear();
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

/* The length of the valid UTF-8 sequence at p[0 .. n) that shows as what
 * it is, or 0: no overlong forms, no surrogates, nothing above U+10FFFF,
 * no C1 control (U+0080..U+009F), and none of the invisible characters
 * and direction marks that could make a name read as another (U+061C,
 * U+200B..U+200F, U+2028..U+202E, U+2060..U+2069, U+FEFF). */
static size_t utf8_printable(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (k == 0 || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0) || (c == 0xF0 && p[1] < 0x90) ||
        (c == 0xF4 && p[1] >= 0x90))
        return 0; /* overlong, a surrogate, above U+10FFFF */
    if (c == 0xC2 && p[1] < 0xA0)
        return 0; /* C1 controls */
    long cp = c & (0x7F >> k);
    for (size_t i = 1; i < k; i++)
        cp = cp << 6 | (p[i] & 0x3F);
    if (cp == 0x061C || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
        (cp >= 0x2060 && cp <= 0x2069) || cp == 0xFEFF)
        return 0;
    return k;
}

const char *sr_escape_n(const void *s, size_t len, char *out, size_t n) {
    const unsigned char *p = s;
    size_t used = 0;
    if (n == 0)
        return out;
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        char one[8];
        size_t k = 1, take = 1;
        if (c >= 0x80 && (take = utf8_printable(p + i, len - i)) > 0) {
            memcpy(one, p + i, take); /* a character, as it is */
            k = take;
        } else if (c < 0x20 || c >= 0x7f || c == '\\') {
            take = 1;
            k = (size_t)snprintf(one, sizeof one, c == '\n' ? "\\n" : c == '\\' ? "\\\\" : "\\x%02x", c);
        } else {
            take = 1;
            one[0] = (char)c;
        }
        if (used + k + 4 > n) {
            snprintf(out + used, n - used, "...");
            return out;
        }
        memcpy(out + used, one, k);
        used += k;
        i += take;
    }
    out[used] = '\0';
    return out;
}

const char *sr_escape(const char *s, char *out, size_t n) { return sr_escape_n(s, strlen(s), out, n); }
