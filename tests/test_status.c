/* test_status.c — the one final message of a failing process
 * (sr_error_final_claim, status.h): when two threads witness the same
 * failure — main reporting a peer's loss while the PMIx lost-connection
 * handler sees the launcher die — the first claim wins, and a later
 * claimer is told no only after the winner's message is out, so the
 * process neither prints two errors nor exits between a claim and its
 * message (tests/launcher.sh's "one message" check raced on this).
 * Then the one escaper (sr_escape, sr_escape_n): valid UTF-8 as it is,
 * C0, DEL and C1 controls, invalid bytes (a stray continuation, a cut
 * sequence, an overlong form, a surrogate, above U+10FFFF) and
 * backslashes escaped, a cut only between characters. */
#include "srconfig.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "tap.h"

static atomic_bool claimed, printed;

/* The first witness: claims, takes 300 ms to "print", then says done. */
static void *first_witness(void *arg) {
    bool *won = arg;
    *won = sr_error_final_claim();
    atomic_store(&claimed, true);
    const struct timespec printing = {0, 300 * 1000 * 1000};
    nanosleep(&printing, NULL);
    atomic_store(&printed, true);
    sr_error_final_done();
    return NULL;
}

int main(void) {
    pthread_t th;
    bool first_won = false;
    if (pthread_create(&th, NULL, first_witness, &first_won) != 0)
        return 99;
    const struct timespec tick = {0, 1000 * 1000};
    while (!atomic_load(&claimed))
        nanosleep(&tick, NULL);
    bool second_won = sr_error_final_claim();
    bool second_saw_message = atomic_load(&printed);
    pthread_join(th, NULL);
    tap_ok(first_won, "the first claim in the process wins");
    tap_ok(!second_won, "a second witness's claim loses (it prints nothing)");
    tap_ok(second_saw_message, "...and returns only after the winner's message is out");
    tap_ok(!sr_error_final_claim(), "a claim after the message is out loses too");
    /* another thread's line after the final message: dropped */
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    bool quiet = false;
    if (saved >= 0 && tmp && dup2(fileno(tmp), 2) == 2) {
        sr_log_warn("a line after the final message");
        fflush(stderr);
        quiet = ftell(tmp) == 0 && lseek(2, 0, SEEK_END) == 0;
        dup2(saved, 2);
    }
    if (saved >= 0)
        close(saved);
    if (tmp)
        fclose(tmp);
    tap_ok(quiet, "...and after it another thread's log line is dropped (nothing follows the final error)");

    static const struct {
        const char *in, *want, *what;
    } cases[] = {
        {"caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80",
         "valid UTF-8 (2, 3, 4 bytes) as it is"},
        {"a\nb\tc\x7f\\", "a\\nb\\x09c\\x7f\\\\", "C0 controls, DEL and the backslash escaped"},
        {"\xc2\x85|\xc2\x9f|\xc2\xa0", "\\xc2\\x85|\\xc2\\x9f|\xc2\xa0",
         "C1 controls escaped byte by byte, U+00A0 kept"},
        {"\x80x\xe2\x80", "\\x80x\\xe2\\x80", "a stray continuation byte and a cut sequence escaped"},
        {"\xc0\xaf\xe0\x80\xaf", "\\xc0\\xaf\\xe0\\x80\\xaf", "overlong forms escaped"},
        {"\xed\xa0\x80\xf4\x90\x80\x80", "\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80",
         "a surrogate and a code point above U+10FFFF escaped"},
        {"a\xe2\x80\xae"
         "b\xe2\x80\x8b"
         "c\xef\xbb\xbf",
         "a\\xe2\\x80\\xaeb\\xe2\\x80\\x8bc\\xef\\xbb\\xbf",
         "a direction override, a zero-width space and U+FEFF escaped"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[128];
        sr_escape(cases[i].in, out, sizeof out);
        tap_ok(strcmp(out, cases[i].want) == 0, "sr_escape: %s (got \"%s\")", cases[i].what, out);
    }
    char out[16];
    sr_escape_n("a\0b", 3, out, sizeof out);
    tap_ok(strcmp(out, "a\\x00b") == 0, "sr_escape_n: a NUL inside escaped (got \"%s\")", out);
    sr_escape("\xe2\x80\x94\xe2\x80\x94\xe2\x80\x94\xe2\x80\x94", out, 12);
    tap_ok(strcmp(out, "\xe2\x80\x94\xe2\x80\x94...") == 0, "a cut falls between characters, marked ... (got \"%s\")",
           out);
    return tap_done();
}
