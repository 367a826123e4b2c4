/* replay.c — a main() for a libFuzzer harness in the normal build: feeds
 * every file named on the command line (or found in a directory named
 * there) to LLVMFuzzerTestOneInput once, in name order, and prints one TAP
 * line per input.  tests/fuzz.sh's fast tier replays the committed corpora
 * this way; coverage-guided fuzzing needs clang's libFuzzer (make fuzz).
 * A crash or a sanitizer report ends the process, which the test sees. */
#include "srconfig.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* read_all: the whole file in a malloc'd buffer (NULL and errno on failure);
 * the caller frees it.  A zero-length file gives a 1-byte buffer. */
static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int tested = 0, failed = 0;

static void replay_file(const char *path) {
    size_t len = 0;
    uint8_t *data = read_all(path, &len);
    tested++;
    if (!data) {
        failed++;
        printf("not ok %d - %s: %s\n", tested, path, strerror(errno));
        return;
    }
    /* libFuzzer hands the harness exactly len bytes: a copy of that size,
     * so AddressSanitizer sees a read past the end */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact && len)
        memcpy(exact, data, len);
    free(data);
    if (!exact) {
        failed++;
        printf("not ok %d - %s: out of memory\n", tested, path);
        return;
    }
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    printf("ok %d - %s (%zu bytes) replayed\n", tested, path, len);
    fflush(stdout);
}

static void replay(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        replay_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        tested++, failed++;
        printf("not ok %d - %s: %s\n", tested, path, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **more = realloc(names, (n + 1) * sizeof *names);
        size_t plen = strlen(path) + strlen(e->d_name) + 2;
        char *full = malloc(plen);
        if (!more || !full) {
            free(full);
            names = more ? more : names;
            break;
        }
        names = more;
        snprintf(full, plen, "%s/%s", path, e->d_name);
        names[n++] = full;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        replay_file(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 64;
    }
    for (int i = 1; i < argc; i++)
        replay(argv[i]);
    printf("1..%d\n", tested);
    return failed ? 1 : 0;
}
