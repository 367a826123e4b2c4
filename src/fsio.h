/* fsio.h — bytes on disk: whole writes and reads, fsync of files and
 * directories, the one atomic-write helper, and write errors with hints.
 *
 * fsio owns the file-system rules every output follows (ARCHITECTURE.md §3
 * and §6, "Atomic outputs"): a file appears under its name only when complete — written
 * to a temporary name in the same directory, fsynced, renamed into place,
 * the directory fsynced — and files are created with the user's umask from
 * mode 0664 (never world-writable).  `data prepare`, both model exports and
 * the test suite's parameter dump write through sr_fsio_atomic_write;
 * checkpoints use the same primitives on whole directories (ckpt.c). */
#ifndef SR_FSIO_H
#define SR_FSIO_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "status.h"

/* Modes before the umask: never world-writable, even under umask 000. */
#define SR_FSIO_FILE_MODE 0664
#define SR_FSIO_DIR_MODE 0775

/* Writes all n bytes (retrying short writes and EINTR).  0, or -1 with
 * errno (ENOSPC when the device accepts no more bytes). */
int sr_fsio_write_all(int fd, const void *buf, size_t n);
/* Reads exactly n bytes at off.  0, or -1 with errno (0 = the file ended). */
int sr_fsio_pread_all(int fd, void *buf, size_t n, uint64_t off);
/* fsync of a directory.  0, or -1 with errno. */
int sr_fsio_fsync_dir(const char *path);
/* mkdir -p with SR_FSIO_DIR_MODE; ENOTDIR when the path is not a directory. */
int sr_fsio_mkdir_p(const char *path);
/* Removes a directory holding only files (a checkpoint), by path: the last
 * component must be a real directory (never followed); see
 * sr_fsio_remove_flat_dir_at.  0 (also when it does not exist), or -1 with
 * errno. */
int sr_fsio_remove_flat_dir(const char *path);

/* Inside directories the program did not name itself (a checkpoint's
 * step_* entries, its manifest and shard files), nothing is followed: the
 * path a user names (checkpoint.dir, checkpoint.resume, `ckpt ... PATH`,
 * the `latest` link) is resolved once into a directory descriptor, and the
 * names found in it are opened relative to that descriptor with O_NOFOLLOW.
 *
 * sr_fsio_open_dir: the user-named directory (symbolic links followed), -1
 * with errno otherwise.
 * sr_fsio_open_subdir: entry `name` of dirfd, which must be a real
 * directory (ELOOP for a symbolic link, ENOTDIR for anything else).
 * sr_fsio_open_file: entry `name` of dirfd (AT_FDCWD: a path), read-only,
 * never blocking (a FIFO opens at once), which must be a regular file:
 * -1 with errno, or with errno EINVAL and *sb describing what it is.
 * sr_fsio_kind: "a directory", "a FIFO", "a symbolic link", ... for
 * messages. */
int sr_fsio_open_dir(const char *path);
int sr_fsio_open_subdir(int dirfd, const char *name);
int sr_fsio_open_file(int dirfd, const char *name, bool follow, struct stat *sb);
const char *sr_fsio_kind(mode_t mode);
/* A directory stream over dirfd's entries from the first, on a fresh open
 * file description (a dup() would share dirfd's offset, so a second listing
 * would start at the end).  NULL with errno; closedir() it. */
DIR *sr_fsio_list_dir(int dirfd);
/* Removes entry `name` of dirfd if it is a real directory holding only
 * files: its entries are unlinked by name (a symbolic link among them is
 * removed, never followed), then the directory.  0, or -1 with errno
 * (ENOTDIR/ELOOP when `name` is not a real directory: nothing removed). */
int sr_fsio_remove_flat_dir_at(int dirfd, const char *name);

/* SR_ERR_IO "PATH: write failed: <errno>" with a hint for a full disk,
 * quota or file-size limit; returns the status. */
sr_status sr_fsio_write_error(const char *path, int err);
/* A file or directory that could not be created, by its errno: a full disk
 * or quota as sr_fsio_write_error; out of descriptors (EMFILE, ENFILE)
 * SR_ERR_IO naming the errno with the ulimit -n hint; anything else
 * SR_ERR_CANTCREAT "PATH: cannot create: <errno>".  Returns the status. */
sr_status sr_fsio_create_error(const char *path, int err);

/* Fills an open file.  `fd` is the temporary file, `tmp` its name (for
 * messages).  Returns SR_OK or a recorded failure. */
typedef sr_status (*sr_fsio_writer)(int fd, const char *tmp, void *ctx);

/* Writes `path` atomically: `write` fills PATH.tmp.<pid> (created
 * exclusively with SR_FSIO_FILE_MODE), which is then fsynced, closed,
 * renamed onto `path`, and the directory fsynced.  On any failure the
 * temporary file is removed and `path` is untouched.  SR_ERR_CANTCREAT
 * when the temporary file cannot be created or renamed, SR_ERR_IO for a
 * failed write or fsync, or what `write` returned. */
sr_status sr_fsio_atomic_write(const char *path, sr_fsio_writer write, void *ctx);

#endif
