/* fsio.c — whole writes and reads, fsync, the atomic write; see fsio.h. */
#include "srconfig.h"

#include "fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "line.h"
#include "mem.h"
#include "signals.h"

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

/* Notes dir in created[n] (", "-separated; "..." once full). */
static void note_created(char *created, size_t n, const char *dir) {
    if (!created || !n)
        return;
    size_t len = strlen(created);
    if (len + strlen(dir) + 6 < n)
        snprintf(created + len, n - len, "%s%s", len ? ", " : "", dir);
    else if (len + 5 < n && (len < 3 || strcmp(created + len - 3, "...") != 0))
        snprintf(created + len, n - len, ", ...");
}

int sr_fsio_mkdir_p(const char *path) { return sr_fsio_mkdir_p_created(path, NULL, 0); }

int sr_fsio_mkdir_p_created(const char *path, char *created, size_t n) {
    char tmp[PATH_MAX];
    if (created && n)
        created[0] = '\0';
    if (strlen(path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(tmp, path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, SR_FSIO_DIR_MODE) == 0)
                note_created(created, n, tmp);
            else if (errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, SR_FSIO_DIR_MODE) == 0)
        note_created(created, n, tmp);
    else if (errno != EEXIST)
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

int sr_fsio_remove_dir(const char *path, sr_fsio_owned owned, void *ctx, char *left, size_t nleft) {
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return sr_fsio_remove_dir_at(AT_FDCWD, path, owned, ctx, left, nleft);
    snprintf(parent, sizeof parent, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int pfd = sr_fsio_open_dir(parent);
    if (pfd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = sr_fsio_remove_dir_at(pfd, slash + 1, owned, ctx, left, nleft);
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

int sr_fsio_remove_dir_at(int dirfd, const char *name, sr_fsio_owned owned, void *ctx, char *left, size_t nleft) {
    if (nleft)
        left[0] = '\0';
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
    sr_line l = sr_line_on(left, nleft);
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat sb;
        bool mine =
            fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) && owned(de->d_name, ctx);
        if (mine && unlinkat(fd, de->d_name, 0) == 0)
            continue;
        if (mine && errno == ENOENT)
            continue;
        if (mine) {
            rc = -1;
            err = errno;
        }
        char e[96];
        sr_line_item(&l, ", ", "%s", sr_escape(de->d_name, e, sizeof e));
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == 0) {
        rc = -1;
        err = errno == EEXIST ? ENOTEMPTY : errno;
    }
    errno = err;
    return rc;
}

static sr_status write_error(const char *path, int err, const char *space) {
    const char *hint = err == EFBIG ? " (hint: a file-size limit applies; see ulimit -f)" : "";
    if (err == ENOSPC || err == EDQUOT)
        return sr_error(SR_ERR_IO, "%s: write failed: %s (hint: the file system is full or over quota; %s)", path,
                        strerror(err), space);
    return sr_error(SR_ERR_IO, "%s: write failed: %s%s", path, strerror(err), hint);
}

sr_status sr_fsio_write_error(const char *path, int err) { return write_error(path, err, "free space"); }

sr_status sr_fsio_write_error_ckpt(const char *path, int err) {
    return write_error(path, err, "free space or lower checkpoint.keep");
}

static sr_status create_error(const char *path, int err, const char *space) {
    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
        return write_error(path, err, space);
    if (err == EMFILE || err == ENFILE)
        return sr_error(SR_ERR_IO, "%s: cannot create: %s (%s) (hint: raise the open-file limit, ulimit -n)", path,
                        strerror(err), err == EMFILE ? "EMFILE" : "ENFILE");
    return sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(err));
}

sr_status sr_fsio_create_error(const char *path, int err) { return create_error(path, err, "free space"); }

sr_status sr_fsio_create_error_ckpt(const char *path, int err) {
    return create_error(path, err, "free space or lower checkpoint.keep");
}

void sr_fsio_parent(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path), path);
}

/* Where an output named `path` is written (see sr_fsio_atomic_write). */
static sr_status output_target(const char *path, char *out, size_t n) {
    struct stat lsb, sb;
    if (snprintf(out, n, "%s", path) >= (int)n)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(ENAMETOOLONG));
    if (lstat(path, &lsb) != 0)
        return SR_OK; /* nothing there (or the directory is missing: the create says so) */
    if (S_ISREG(lsb.st_mode))
        return SR_OK;
    if (!S_ISLNK(lsb.st_mode))
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: %s is there; an output replaces only a regular file (hint: name a file, or remove "
                        "what is there)",
                        path, sr_fsio_kind(lsb.st_mode));
    if (stat(path, &sb) != 0)
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: a symbolic link to nothing (%s); an output replaces only a regular file or writes "
                        "through a link to one",
                        path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: a symbolic link to %s; an output replaces only a regular file (hint: name a file)", path,
                        sr_fsio_kind(sb.st_mode));
    char real[PATH_MAX];
    if (!realpath(path, real))
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot resolve the symbolic link: %s", path, strerror(errno));
    if (snprintf(out, n, "%s", real) >= (int)n)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(ENAMETOOLONG));
    return SR_OK;
}

/* Where a file the program names itself is written: `path` itself, never
 * through a link; only nothing or a regular file may be there. */
static sr_status own_target(const char *path, char *out, size_t n) {
    struct stat lsb;
    if (snprintf(out, n, "%s", path) >= (int)n)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(ENAMETOOLONG));
    if (lstat(path, &lsb) != 0 || S_ISREG(lsb.st_mode))
        return SR_OK;
    return sr_fsio_own_refused(path, lsb.st_mode);
}

sr_status sr_fsio_own_refused(const char *path, mode_t mode) {
    return sr_error(SR_ERR_CANTCREAT,
                    "%s: %s is there; shardrun reads and writes the files it names itself only as regular files, "
                    "never through a link (hint: remove it)",
                    path, sr_fsio_kind(mode));
}

int sr_fsio_open_own(const char *path, struct stat *sb) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        /* O_NOFOLLOW on a link: ELOOP; say what is there */
        if ((err == ELOOP || err == ENXIO || err == EMLINK) && lstat(path, sb) == 0 && !S_ISREG(sb->st_mode)) {
            errno = EINVAL;
            return -1;
        }
        errno = err;
        return -1;
    }
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        int err = S_ISREG(sb->st_mode) ? errno : EINVAL;
        close(fd);
        errno = err;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

sr_status sr_fsio_open_append_own(const char *path, const char *what, int *fd) {
    *fd = -1;
    struct stat sb;
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, SR_FSIO_FILE_MODE);
    if (f < 0) {
        int err = errno;
        if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return sr_fsio_own_refused(path, sb.st_mode);
        return sr_error(err == EMFILE || err == ENFILE ? SR_ERR_IO : SR_ERR_CANTCREAT, "%s: cannot create %s: %s", path,
                        what, strerror(err));
    }
    if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        sr_status st = S_ISREG(sb.st_mode)
                           ? sr_error(SR_ERR_CANTCREAT, "%s: cannot create %s: %s", path, what, strerror(errno))
                           : sr_fsio_own_refused(path, sb.st_mode);
        close(f);
        return st;
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    return SR_OK;
}

/* the guards: inputs by device and inode, and one directory marker */
static struct {
    dev_t dev;
    ino_t ino;
    char *path;
} * guard_in;
static int nguard_in;
static const char *guard_name, *guard_what;

sr_status sr_fsio_guard_input(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sr_error(SR_ERR_NOINPUT, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return SR_OK;
    void *more = sr_realloc(guard_in, (size_t)(nguard_in + 1) * sizeof *guard_in);
    char *name = sr_strdup(path);
    if (!more || !name) {
        free(name);
        if (more)
            guard_in = more;
        return sr_error_oom("the list of inputs");
    }
    guard_in = more;
    guard_in[nguard_in].dev = sb.st_dev;
    guard_in[nguard_in].ino = sb.st_ino;
    guard_in[nguard_in++].path = name;
    return SR_OK;
}

void sr_fsio_guard_marker(const char *name, const char *what) {
    guard_name = name;
    guard_what = what;
}

/* SR_ERR_CANTCREAT when target (in directory dir) is a guarded input or
 * dir is a marked directory; `path` is the output's name for messages. */
static sr_status check_guards(const char *path, const char *target, const char *dir) {
    struct stat sb;
    if (stat(target, &sb) == 0)
        for (int i = 0; i < nguard_in; i++)
            if (guard_in[i].dev == sb.st_dev && guard_in[i].ino == sb.st_ino)
                return sr_error(SR_ERR_CANTCREAT,
                                "%s: this output is the input %s (the same file); refusing to replace it (hint: "
                                "name another output with -o)",
                                path, guard_in[i].path);
    if (guard_name) {
        char mark[PATH_MAX];
        if (snprintf(mark, sizeof mark, "%s/%s", dir, guard_name) < (int)sizeof mark && lstat(mark, &sb) == 0 &&
            S_ISREG(sb.st_mode))
            return sr_error(SR_ERR_CANTCREAT,
                            "%s: %s is %s (it holds %s); no output is written into one, whose files are deleted "
                            "with it (hint: name a directory outside the checkpoint with -o)",
                            path, dir, guard_what, guard_name);
    }
    return SR_OK;
}

/* The process's umask, read without changing it (umask(2) both sets and
 * reads, which would race with files other threads create). */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned m = 022;
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "Umask: %o", &m) == 1;
    if (f)
        fclose(f);
    if (!found) {
        mode_t old = umask(022);
        umask(old);
        m = old;
    }
    return (mode_t)m;
}

static sr_status stage(const char *path, sr_fsio_staged *s, bool own) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->track = -1;
    s->path = path;
    sr_status st =
        own ? own_target(path, s->target, sizeof s->target) : output_target(path, s->target, sizeof s->target);
    if (st != SR_OK)
        return st;
    sr_fsio_parent(s->target, s->dir, sizeof s->dir);
    st = check_guards(path, s->target, s->dir);
    if (st != SR_OK)
        return st;
    const char *base = strrchr(s->target, '/') ? strrchr(s->target, '/') + 1 : s->target;
    size_t len = strlen(s->dir) + strlen(base) + 16;
    s->tmp = sr_malloc(len);
    if (!s->tmp)
        return sr_error_oom("the name of a temporary file");
    snprintf(s->tmp, len, "%s/.%s.XXXXXX", s->dir, base);
    sr_signals_hold(); /* no signal ends the process between the creation and the registration */
    s->fd = mkostemp(s->tmp, O_CLOEXEC);
    if (s->fd >= 0)
        s->track = sr_signals_track(s->tmp); /* removed if a signal ends the process */
    else
        sr_signals_release();
    if (s->fd < 0) {
        int err = errno;
        /* the directory is the problem: name it, and the output */
        st = err == ENOSPC || err == EDQUOT || err == EMFILE || err == ENFILE
                 ? sr_fsio_create_error(path, err)
                 : sr_error(SR_ERR_CANTCREAT, "%s: cannot create a temporary file in %s: %s", path, s->dir,
                            strerror(err));
        free(s->tmp);
        s->tmp = NULL;
        return st;
    }
    if (fchmod(s->fd, SR_FSIO_FILE_MODE & ~current_umask()) != 0) {
        st = sr_error(SR_ERR_CANTCREAT, "%s: cannot set the mode of %s: %s", path, s->tmp, strerror(errno));
        sr_fsio_stage_abort(s);
    }
    return st;
}

sr_status sr_fsio_stage(const char *path, sr_fsio_staged *s) { return stage(path, s, false); }
sr_status sr_fsio_stage_own(const char *path, sr_fsio_staged *s) { return stage(path, s, true); }

sr_status sr_fsio_stage_finish(sr_fsio_staged *s) {
    sr_status st = SR_OK;
    if (s->fd < 0)
        return st;
    if (fsync(s->fd) != 0)
        st = sr_fsio_write_error(s->path, errno);
    if (close(s->fd) != 0 && st == SR_OK)
        st = sr_fsio_write_error(s->path, errno);
    s->fd = -1;
    if (st != SR_OK)
        sr_fsio_stage_abort(s);
    return st;
}

sr_status sr_fsio_stage_commit(sr_fsio_staged *s) {
    sr_status st = sr_fsio_stage_finish(s);
    if (st != SR_OK)
        return st;
    if (rename(s->tmp, s->target) != 0)
        st = sr_error(SR_ERR_CANTCREAT, "%s: cannot rename %s into place: %s", s->path, s->tmp, strerror(errno));
    if (st == SR_OK && sr_fsio_fsync_dir(s->dir) != 0)
        st = sr_fsio_write_error(s->dir, errno);
    if (st != SR_OK)
        unlink(s->tmp);
    sr_signals_untrack(s->track);
    s->track = -1;
    free(s->tmp);
    s->tmp = NULL;
    return st;
}

void sr_fsio_stage_abort(sr_fsio_staged *s) {
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (s->tmp)
        unlink(s->tmp);
    sr_signals_untrack(s->track);
    s->track = -1;
    free(s->tmp);
    s->tmp = NULL;
}

static sr_status atomic_write(const char *path, sr_fsio_writer write_fn, void *ctx, bool own) {
    sr_fsio_staged s;
    sr_status st = stage(path, &s, own);
    if (st != SR_OK)
        return st;
    st = write_fn(s.fd, path, ctx);
    if (st != SR_OK) {
        sr_fsio_stage_abort(&s);
        return st;
    }
    return sr_fsio_stage_commit(&s);
}

sr_status sr_fsio_atomic_write(const char *path, sr_fsio_writer write_fn, void *ctx) {
    return atomic_write(path, write_fn, ctx, false);
}

sr_status sr_fsio_atomic_write_own(const char *path, sr_fsio_writer write_fn, void *ctx) {
    return atomic_write(path, write_fn, ctx, true);
}

sr_status sr_fsio_open_append(const char *path, const char *what, bool truncate, int *fd) {
    *fd = -1;
    struct stat sb;
    /* the kind first: opening a FIFO without a reader fails (ENXIO), a
     * socket cannot be opened at all */
    bool there = stat(path, &sb) == 0;
    int f = -1;
    if (!there || S_ISREG(sb.st_mode) || S_ISCHR(sb.st_mode)) {
        f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, SR_FSIO_FILE_MODE);
        if (f < 0)
            return sr_error(SR_ERR_CANTCREAT, "%s: cannot create %s: %s", path, what, strerror(errno));
        if (fstat(f, &sb) != 0) {
            close(f);
            return sr_error(SR_ERR_CANTCREAT, "%s: cannot create %s: %s", path, what, strerror(errno));
        }
    }
    if (!S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode)) {
        if (f >= 0)
            close(f);
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: %s is there; %s is appended to a regular file (or a character device such as "
                        "/dev/null)",
                        path, sr_fsio_kind(sb.st_mode), what);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        (truncate && S_ISREG(sb.st_mode) && ftruncate(f, 0) != 0)) {
        sr_status st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create %s: %s", path, what, strerror(errno));
        close(f);
        return st;
    }
    *fd = f;
    return SR_OK;
}

sr_status sr_fsio_open_input(const char *path, const char *what, bool stream, const char *hint, int *fd,
                             struct stat *sb) {
    *fd = -1;
    char more[512] = "";
    if (hint)
        snprintf(more, sizeof more, " (hint: %s)", hint);
    /* mapped inputs: the one primitive for regular files (also the
     * checkpoint's, relative to its directory) */
    int f = stream ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : sr_fsio_open_file(AT_FDCWD, path, true, sb);
    if (f < 0 && !stream && errno == EINVAL)
        return sr_error(SR_ERR_NOINPUT, "%s: %s is %s; expected a regular file%s", path, what,
                        sr_fsio_kind(sb->st_mode), more);
    if (f < 0)
        return sr_error(errno == EMFILE || errno == ENFILE ? SR_ERR_IO : SR_ERR_NOINPUT, "%s: cannot open %s: %s%s",
                        path, what, strerror(errno), more);
    if (stream && fstat(f, sb) != 0) {
        sr_status st = sr_error(SR_ERR_NOINPUT, "%s: cannot open %s: %s%s", path, what, strerror(errno), more);
        close(f);
        return st;
    }
    bool ok = S_ISREG(sb->st_mode) || (stream && (S_ISFIFO(sb->st_mode) || S_ISCHR(sb->st_mode)));
    if (!ok) {
        close(f);
        return sr_error(SR_ERR_NOINPUT, "%s: %s is %s; expected a regular file%s%s", path, what,
                        sr_fsio_kind(sb->st_mode), stream ? " or a pipe" : "", more);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        sr_status st = sr_error(SR_ERR_NOINPUT, "%s: cannot open %s: %s%s", path, what, strerror(errno), more);
        close(f);
        return st;
    }
    if (S_ISFIFO(sb->st_mode)) {
        /* a FIFO opened without blocking reads end-of-file until a writer
         * comes: wait in poll() for its first bytes or its close instead */
        struct pollfd p = {.fd = f, .events = POLLIN};
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
            ;
    }
    *fd = f;
    return SR_OK;
}

sr_status sr_fsio_open_input_file(const char *path, const char *what, const char *hint, FILE **out) {
    *out = NULL;
    int fd;
    struct stat sb;
    sr_status st = sr_fsio_open_input(path, what, true, hint, &fd, &sb);
    if (st != SR_OK)
        return st;
    *out = fdopen(fd, "rb");
    if (!*out) {
        close(fd);
        return sr_error_oom("an input stream");
    }
    return SR_OK;
}

FILE *sr_fsio_stream(int fd) {
    int fd2 = dup(fd);
    FILE *f = fd2 >= 0 ? fdopen(fd2, "w") : NULL;
    if (!f && fd2 >= 0) {
        int e = errno;
        close(fd2);
        errno = e;
    }
    return f;
}

sr_status sr_fsio_stream_close(FILE *f, const char *name) {
    errno = 0;
    bool bad = fflush(f) != 0 || ferror(f);
    int err = errno;
    if (fclose(f) != 0 && !bad)
        bad = true, err = errno;
    return bad ? sr_fsio_write_error(name, err ? err : EIO) : SR_OK;
}

sr_status sr_fsio_expand(const char *key, const char *tmpl, const sr_path_vars *v, char *out, size_t n) {
    size_t used = 0;
    char hint[160];
    sr_fmt(hint, sizeof hint, "%s%s%s%s%%%% a percent sign", v->host ? "%h is the host name, " : "",
           v->node ? "%n the node's name, " : "", v->job ? "%j the job id, " : "", v->user ? "%u the user, " : "");
    for (const char *p = tmpl; *p; p++) {
        const char *add = NULL;
        char one[2] = {*p, 0};
        if (*p != '%')
            add = one;
        else if (p[1] == '%')
            add = "%", p++;
        else if (p[1] == 'h' || p[1] == 'n' || p[1] == 'j' || p[1] == 'u') {
            add = p[1] == 'h' ? v->host : p[1] == 'n' ? v->node : p[1] == 'j' ? v->job : v->user;
            p += add != NULL;
        }
        if (!add)
            return sr_error(SR_ERR_CONFIG, "%s '%s': %%%c is not a substitution (hint: %s)", key, tmpl,
                            p[1] ? p[1] : ' ', hint);
        size_t k = strlen(add);
        if (used + k + 1 > n)
            return sr_error(SR_ERR_CONFIG, "%s '%s': the expanded path is longer than %zu bytes", key, tmpl, n - 1);
        for (size_t i = 0; i < k; i++) {
            /* a substituted name keeps [A-Za-z0-9._-] (mpirun's job ids
             * hold brackets and commas); the template's own text is kept */
            char c = add[i];
            bool ok = add == one || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_' || (c == '%' && p[0] == '%');
            out[used++] = ok ? c : '_';
        }
    }
    out[used] = '\0';
    return SR_OK;
}
