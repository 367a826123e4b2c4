/* fsio.c — whole writes and reads, fsync, the atomic write; see fsio.h. */
#include "srconfig.h"

#include "fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem.h"

int sr_fsio_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sr_fsio_pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int sr_fsio_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int sr_fsio_mkdir_p(const char *path) {
    char tmp[PATH_MAX];
    if (strlen(path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(tmp, path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, SR_FSIO_DIR_MODE) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, SR_FSIO_DIR_MODE) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    if (stat(tmp, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int sr_fsio_remove_flat_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    int dfd = dirfd(d), rc = 0, err = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            if (unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT) {
                rc = -1;
                err = errno;
            }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT) {
        rc = -1;
        err = errno;
    }
    errno = err;
    return rc;
}

sr_status sr_fsio_write_error(const char *path, int err) {
    const char *hint = err == ENOSPC || err == EDQUOT ? " (hint: the file system is full or over quota; free space "
                                                        "or lower checkpoint.keep)"
                       : err == EFBIG                 ? " (hint: a file-size limit applies; see ulimit -f)"
                                                      : "";
    return sr_error(SR_ERR_IO, "%s: write failed: %s%s", path, strerror(err), hint);
}

/* The directory part of path ("." for a bare name). */
static void parent_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path), path);
}

sr_status sr_fsio_atomic_write(const char *path, sr_fsio_writer write_fn, void *ctx) {
    size_t len = strlen(path) + 32;
    char *tmp = sr_malloc(len);
    if (!tmp)
        return sr_error_oom("the name of a temporary file");
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SR_FSIO_FILE_MODE);
    if (fd < 0) {
        sr_status st = errno == ENOSPC || errno == EDQUOT
                           ? sr_fsio_write_error(tmp, errno)
                           : sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    sr_status st = write_fn(fd, tmp, ctx);
    if (st == SR_OK && fsync(fd) != 0)
        st = sr_fsio_write_error(path, errno);
    if (close(fd) != 0 && st == SR_OK)
        st = sr_fsio_write_error(path, errno);
    if (st == SR_OK && rename(tmp, path) != 0)
        st = sr_error(SR_ERR_CANTCREAT, "%s: cannot rename into place: %s", path, strerror(errno));
    if (st == SR_OK) {
        char dir[PATH_MAX];
        parent_of(path, dir, sizeof dir);
        if (sr_fsio_fsync_dir(dir) != 0)
            st = sr_fsio_write_error(dir, errno);
    }
    if (st != SR_OK)
        unlink(tmp);
    free(tmp);
    return st;
}
