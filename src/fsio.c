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
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return sr_fsio_remove_flat_dir_at(AT_FDCWD, path);
    snprintf(parent, sizeof parent, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int pfd = sr_fsio_open_dir(parent);
    if (pfd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = sr_fsio_remove_flat_dir_at(pfd, slash + 1);
    int err = errno;
    close(pfd);
    errno = err;
    return rc;
}

int sr_fsio_open_dir(const char *path) { return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

int sr_fsio_open_subdir(int dirfd, const char *name) {
    return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int sr_fsio_open_file(int dirfd, const char *name, bool follow, struct stat *sb) {
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0)
        return -1;
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

const char *sr_fsio_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISLNK(mode)  ? "a symbolic link"
           : S_ISREG(mode)  ? "a regular file"
                            : "not a regular file";
}

DIR *sr_fsio_list_dir(int dirfd) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return d;
}

int sr_fsio_remove_flat_dir_at(int dirfd, const char *name) {
    int fd = sr_fsio_open_subdir(dirfd, name);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    struct dirent *de;
    int rc = 0, err = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && unlinkat(fd, de->d_name, 0) != 0 &&
            errno != ENOENT) {
            rc = -1;
            err = errno;
        }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
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

sr_status sr_fsio_create_error(const char *path, int err) {
    if (err == ENOSPC || err == EDQUOT)
        return sr_fsio_write_error(path, err);
    if (err == EMFILE || err == ENFILE)
        return sr_error(SR_ERR_IO, "%s: cannot create: %s (%s) (hint: raise the open-file limit, ulimit -n)", path,
                        strerror(err), err == EMFILE ? "EMFILE" : "ENFILE");
    return sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(err));
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
        sr_status st =
            errno == ENOSPC || errno == EDQUOT ? sr_fsio_create_error(tmp, errno) : sr_fsio_create_error(path, errno);
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
