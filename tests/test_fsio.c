/* test_fsio.c — the one atomic write: a complete file appears under its
 * name with mode 0664 less the umask (never world-writable), and on every
 * injected failure — the writer fails half way, the file-size limit is hit
 * (EFBIG), the name is a directory, the directory does not exist — the old
 * content stays, no temporary file is left, and the status says which
 * (74, 73); a FIFO, device or dangling link under the name is refused
 * (73), a link to a regular file written through, and stale temporaries
 * are neither in the way nor removed.  Also mkdir -p and the removal of a
 * directory's owned files. */
#include "srconfig.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fsio.h"
#include "tap.h"

static char dir[256];

typedef struct {
    size_t bytes;
    bool fail_half_way;
} job;

static sr_status writer(int fd, const char *tmp, void *arg) {
    const job *j = arg;
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    for (size_t done = 0; done < j->bytes; done += sizeof buf) {
        if (j->fail_half_way && done >= j->bytes / 2)
            return sr_error(SR_ERR_DATA, "%s: the writer gave up half way", tmp);
        size_t n = j->bytes - done < sizeof buf ? j->bytes - done : sizeof buf;
        if (sr_fsio_write_all(fd, buf, n) != 0)
            return sr_fsio_write_error(tmp, errno);
    }
    return SR_OK;
}

/* Entries of dir other than . and .. and `keep`. */
static int others(const char *keep) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, keep))
            n++;
    closedir(d);
    return n;
}

static long size_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* the owner of the removal test wrote "f" only */
static bool owned_f(const char *name, void *ctx) {
    (void)ctx;
    return strcmp(name, "f") == 0;
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/sr-fsio.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return 99;
    char path[512];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    mode_t old_mask = umask(0);
    job ok = {100000, false};
    sr_status st = sr_fsio_atomic_write(path, writer, &ok);
    struct stat sb;
    tap_ok(st == SR_OK && stat(path, &sb) == 0 && sb.st_size == 100000, "a complete file appears under its name");
    tap_ok((sb.st_mode & 0777) == 0664, "created 0664 even under umask 000: never world-writable (%o)",
           sb.st_mode & 0777);
    umask(old_mask);
    tap_ok(others("out.bin") == 0, "no temporary file is left");

    job half = {200000, true};
    st = sr_fsio_atomic_write(path, writer, &half);
    tap_ok(st == SR_ERR_DATA && strstr(sr_error_message(), "half way"), "a writer that fails returns its own status");
    tap_ok(size_of(path) == 100000 && others("out.bin") == 0, "  ...the old file is untouched, no temporary left");

    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = {50000, 50000};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    setrlimit(RLIMIT_FSIZE, &lim);
    job big = {200000, false};
    st = sr_fsio_atomic_write(path, writer, &big);
    setrlimit(RLIMIT_FSIZE, &old);
    tap_ok(st == SR_ERR_IO && strstr(sr_error_message(), "File too large") && strstr(sr_error_message(), "ulimit -f"),
           "a file-size limit is an I/O error with a hint (74): %s", sr_error_message());
    tap_ok(size_of(path) == 100000 && others("out.bin") == 0, "  ...the old file is untouched, no temporary left");

    char sub[512];
    snprintf(sub, sizeof sub, "%s/adir", dir);
    mkdir(sub, 0755);
    st = sr_fsio_atomic_write(sub, writer, &ok);
    tap_ok(st == SR_ERR_CANTCREAT && strstr(sr_error_message(), "adir: a directory is there"),
           "a name that is a directory is refused, naming its kind (73): %s", sr_error_message());
    rmdir(sub);
    tap_ok(others("out.bin") == 0, "  ...no temporary left");

    /* every kind that is not a regular file: refused before anything is
     * created; a character device (the /dev/null case) only as root */
    snprintf(sub, sizeof sub, "%s/fifo", dir);
    mkfifo(sub, 0644);
    st = sr_fsio_atomic_write(sub, writer, &ok);
    struct stat fsb;
    tap_ok(st == SR_ERR_CANTCREAT && strstr(sr_error_message(), "fifo: a FIFO is there") && lstat(sub, &fsb) == 0 &&
               S_ISFIFO(fsb.st_mode),
           "a FIFO is refused and stays a FIFO (73): %s", sr_error_message());
    unlink(sub);
    snprintf(sub, sizeof sub, "%s/null", dir);
    if (mknod(sub, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        st = sr_fsio_atomic_write(sub, writer, &ok);
        tap_ok(st == SR_ERR_CANTCREAT && strstr(sr_error_message(), "a character device is there") &&
                   lstat(sub, &fsb) == 0 && S_ISCHR(fsb.st_mode),
               "a character device (a copy of /dev/null) is refused and stays a device (73)");
        unlink(sub);
    } else
        /* root's case: SHARDRUN_TEST_REQUIRE=mount (CI) makes it a failure */
        tap_ok(!strstr(getenv("SHARDRUN_TEST_REQUIRE") ? getenv("SHARDRUN_TEST_REQUIRE") : "", "mount"),
               "# SKIP mknod needs root: %s", strerror(errno));
    tap_ok(others("out.bin") == 0, "  ...no temporary left");

    /* a symbolic link to a regular file: the file is replaced, the link kept */
    char target[512];
    snprintf(target, sizeof target, "%s/real.bin", dir);
    snprintf(sub, sizeof sub, "%s/link.bin", dir);
    close(open(target, O_CREAT | O_WRONLY, 0644));
    if (symlink("real.bin", sub) != 0)
        return 99;
    st = sr_fsio_atomic_write(sub, writer, &ok);
    tap_ok(st == SR_OK && lstat(sub, &fsb) == 0 && S_ISLNK(fsb.st_mode) && size_of(target) == 100000,
           "a symbolic link to a regular file: its target replaced, the link kept");
    unlink(sub);
    unlink(target);
    if (symlink("nowhere", sub) != 0)
        return 99;
    st = sr_fsio_atomic_write(sub, writer, &ok);
    tap_ok(st == SR_ERR_CANTCREAT && strstr(sr_error_message(), "a symbolic link to nothing") &&
               lstat(sub, &fsb) == 0 && S_ISLNK(fsb.st_mode),
           "a symbolic link to nothing is refused (73): %s", sr_error_message());
    unlink(sub);

    /* a temporary a kill -9 left, with the name this process would pick if
     * names were per-PID: neither in the way nor removed */
    snprintf(sub, sizeof sub, "%s/.out.bin.AAAAAA", dir);
    close(open(sub, O_CREAT | O_WRONLY, 0644));
    snprintf(target, sizeof target, "%s/out.bin.tmp.%ld", dir, (long)getpid());
    close(open(target, O_CREAT | O_WRONLY, 0644));
    st = sr_fsio_atomic_write(path, writer, &ok);
    tap_ok(st == SR_OK && access(sub, F_OK) == 0 && access(target, F_OK) == 0 && others("out.bin") == 2,
           "stale temporaries neither block a writer nor are removed by it");
    unlink(sub);
    unlink(target);

    snprintf(sub, sizeof sub, "%s/missing/out.bin", dir);
    st = sr_fsio_atomic_write(sub, writer, &ok);
    tap_ok(st == SR_ERR_CANTCREAT && strstr(sr_error_message(), "cannot create"),
           "a directory that does not exist is 73: %s", sr_error_message());

    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    tap_ok(sr_fsio_mkdir_p(sub) == 0 && sr_fsio_mkdir_p(sub) == 0, "mkdir -p makes nested directories, twice is fine");
    snprintf(sub, sizeof sub, "%s/out.bin/x", dir);
    tap_ok(sr_fsio_mkdir_p(path) == -1 && errno == ENOTDIR, "mkdir -p over a file is ENOTDIR");
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    snprintf(path, sizeof path, "%s/a/b/c/f", dir);
    close(open(path, O_CREAT | O_WRONLY, 0644));
    char left[64];
    tap_ok(sr_fsio_remove_dir(sub, owned_f, NULL, left, sizeof left) == 0 && access(sub, F_OK) != 0,
           "a directory is removed with the files its owner wrote");
    sr_fsio_mkdir_p(sub);
    close(open(path, O_CREAT | O_WRONLY, 0644));
    snprintf(path, sizeof path, "%s/a/b/c/precious", dir);
    close(open(path, O_CREAT | O_WRONLY, 0644));
    tap_ok(sr_fsio_remove_dir(sub, owned_f, NULL, left, sizeof left) == -1 && errno == ENOTEMPTY &&
               strcmp(left, "precious") == 0 && access(path, F_OK) == 0,
           "a file its owner did not write stays, named (%s), and so does the directory", left);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path) != 0)
        tap_diag("could not remove %s", dir);
    return tap_done();
}
