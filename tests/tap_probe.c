/* tap_probe.c — tap.h's verdict as a process's exit status, for
 * tests/hardening.sh: `tap_probe pass` passes its one check, `tap_probe
 * fail` fails it; main returns tap_done()'s value either way. */
#include <string.h>

#include "tap.h"

int main(int argc, char **argv) {
    tap_ok(argc > 1 && strcmp(argv[1], "pass") == 0, "the check the argument asks for");
    return tap_done();
}
