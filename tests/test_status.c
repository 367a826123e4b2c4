/* test_status.c — the one final message of a failing process
 * (sr_error_final_claim, status.h): when two threads witness the same
 * failure — main reporting a peer's loss while the PMIx lost-connection
 * handler sees the launcher die — the first claim wins, and a later
 * claimer is told no only after the winner's message is out, so the
 * process neither prints two errors nor exits between a claim and its
 * message (tests/launcher.sh's "one message" check raced on this). */
#include "srconfig.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

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
    return tap_done();
}
