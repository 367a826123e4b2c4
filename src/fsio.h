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

#include <stddef.h>
#include <stdint.h>
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
/* Removes a directory holding only regular files (a checkpoint).  Entries
 * are unlinked by name, never followed.  0, or -1 with errno. */
int sr_fsio_remove_flat_dir(const char *path);

/* SR_ERR_IO "PATH: write failed: <errno>" with a hint for a full disk,
 * quota or file-size limit; returns the status. */
sr_status sr_fsio_write_error(const char *path, int err);

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
