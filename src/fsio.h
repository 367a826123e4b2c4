/* fsio.h — bytes on disk: whole writes and reads, fsync of files and
 * directories, the one atomic-write helper, and write errors with hints.
 *
 * fsio owns the file-system rules every output and input follows
 * (ARCHITECTURE.md §3 and §6, "Atomic outputs"):
 *  - a file appears under its name only when complete: written to a
 *    temporary `.NAME.XXXXXX` (mkstemp) in the target's directory, fsynced,
 *    renamed into place, the directory fsynced; a stale temporary (a kill
 *    -9) is never in the way of a later writer and never removed by guess;
 *  - an output replaces only a regular file: a directory, FIFO, socket or
 *    device under the name is refused (73), and a symbolic link to a
 *    regular file has its target replaced and stays a link;
 *  - appended outputs (the metrics file) open without blocking; FIFOs,
 *    sockets and directories are refused, character devices (/dev/null)
 *    accepted;
 *  - no open() blocks: inputs that are mapped or seeked must be regular
 *    files (opened with O_NONBLOCK, refused at once otherwise); streamed
 *    inputs (job file, `data prepare` inputs, the report's metrics file, a
 *    tokenizer) also accept pipes and FIFOs, whose reads then wait for a
 *    writer as `cat` does;
 *  - files are created with the user's umask from mode 0664 (never
 *    world-writable);
 *  - names the program chooses itself are never reached through a link,
 *    never block, and must be regular files (sr_fsio_open_own below);
 *  - a temporary is registered with signals.h while it exists, so SIGINT,
 *    SIGTERM or SIGHUP remove it before the process ends.
 * `data prepare`, both model exports, `report` and the test suite's
 * parameter dump write through sr_fsio_atomic_write; checkpoints use the
 * same primitives on whole directories (ckpt.c). */
#ifndef SR_FSIO_H
#define SR_FSIO_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "status.h"

/* Modes before the umask: never world-writable, even under umask 000. */
#define SR_FSIO_FILE_MODE 0664
#define SR_FSIO_DIR_MODE 0775

/* Writes all n bytes (retrying short writes and EINTR).  0, or -1 with
 * errno (ENOSPC when the device accepts no more bytes). */
int sr_fsio_write_all(int fd, const void *buf, size_t n);
/* The one path-template expander (log.prometheus, checkpoint.memory.dir):
 * %h the host name, %n the node's name, %j the job id, %u the user, %% a
 * percent sign; a letter whose value is NULL is not a substitution of this
 * key.  A substituted value keeps only [A-Za-z0-9._-], others become '_'.
 * SR_ERR_CONFIG naming `key` for another % sequence or a result that does
 * not fit out[n]. */
typedef struct {
    const char *host, *node, *job, *user;
} sr_path_vars;
sr_status sr_fsio_expand(const char *key, const char *tmpl, const sr_path_vars *v, char *out, size_t n);
/* Reads exactly n bytes at off.  0, or -1 with errno (0 = the file ended). */
int sr_fsio_pread_all(int fd, void *buf, size_t n, uint64_t off);
/* fsync of a directory.  0, or -1 with errno. */
int sr_fsio_fsync_dir(const char *path);
/* The directory part of path into out[n] ("." for a bare name, "/" for
 * one at the root). */
void sr_fsio_parent(const char *path, char *out, size_t n);
/* mkdir -p with SR_FSIO_DIR_MODE; ENOTDIR when the path is not a directory. */
int sr_fsio_mkdir_p(const char *path);
/* The same, naming in created[n] the directories it made (", "-separated,
 * "" when none). */
int sr_fsio_mkdir_p_created(const char *path, char *created, size_t n);

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
/* Whether a removal may unlink entry `name` of a directory: true for a
 * name the directory's owner wrote there. */
typedef bool (*sr_fsio_owned)(const char *name, void *ctx);
/* Removes entry `name` of dirfd if it is a real directory: the regular
 * files in it that `owned` accepts are unlinked by name (nothing is
 * followed), then the directory, if that left it empty.  Nothing is
 * deleted that its owner did not write.  0 (also when it does not exist),
 * or -1 with errno: ENOTDIR/ELOOP when `name` is not a real directory
 * (nothing removed); ENOTEMPTY when other entries remain, their names
 * (comma-separated, escaped, cut at nleft bytes) in `left`. */
int sr_fsio_remove_dir_at(int dirfd, const char *name, sr_fsio_owned owned, void *ctx, char *left, size_t nleft);
/* The same by path (the last component is never followed). */
int sr_fsio_remove_dir(const char *path, sr_fsio_owned owned, void *ctx, char *left, size_t nleft);

/* SR_ERR_IO "PATH: write failed: <errno>" with a hint for a full disk,
 * quota or file-size limit; returns the status.  The _ckpt form is for a
 * checkpoint's files: its full-disk hint also names checkpoint.keep. */
sr_status sr_fsio_write_error(const char *path, int err);
sr_status sr_fsio_write_error_ckpt(const char *path, int err);
/* A file or directory that could not be created, by its errno: a full disk
 * or quota as sr_fsio_write_error; out of descriptors (EMFILE, ENFILE)
 * SR_ERR_IO naming the errno with the ulimit -n hint; anything else
 * SR_ERR_CANTCREAT "PATH: cannot create: <errno>".  Returns the status. */
sr_status sr_fsio_create_error(const char *path, int err);
sr_status sr_fsio_create_error_ckpt(const char *path, int err);

/* Fills an open file.  `fd` is the temporary file; `name` is the output's
 * name as the user gave it (messages name it, never the temporary).
 * Returns SR_OK or a recorded failure. */
typedef sr_status (*sr_fsio_writer)(int fd, const char *name, void *ctx);

/* Guards every later sr_fsio_atomic_write of this process (commands set
 * them before they write).  sr_fsio_guard_input: an input the command
 * reads; an output that resolves to it (same device and inode) is refused,
 * so `report run.jsonl -o run.jsonl` cannot replace its own input.
 * SR_ERR_NOINPUT when it cannot be stat()ed (a pipe is fine: never a
 * target).  sr_fsio_guard_marker: a directory holding a regular file
 * named `name` is `what` (a checkpoint's step directory holds its
 * manifest) and no output is written into it.  Both SR_ERR_CANTCREAT at
 * the write, naming the output. */
sr_status sr_fsio_guard_input(const char *path);
void sr_fsio_guard_marker(const char *name, const char *what);

/* Writes `path` atomically.  The file written is `path` itself when
 * nothing or a regular file is there, or the file a symbolic link there
 * resolves to when that is a regular file; anything else there (a
 * directory, FIFO, socket, device, a link to one or to nothing) is
 * SR_ERR_CANTCREAT naming `path` and its kind, nothing touched.  The
 * guards are checked; `write`
 * fills `.NAME.XXXXXX` (mkstemp, in that file's directory, mode
 * SR_FSIO_FILE_MODE under the umask), which is then fsynced, closed,
 * renamed onto the file, and the directory fsynced.  On any failure the
 * temporary file is removed and the target is untouched.  SR_ERR_CANTCREAT
 * when the target is refused or the temporary cannot be created or
 * renamed, SR_ERR_IO for a failed write or fsync, or what `write`
 * returned. */
sr_status sr_fsio_atomic_write(const char *path, sr_fsio_writer write, void *ctx);
/* Names the program chooses itself (the data's hash caches and index.json,
 * checkpoint.dir/starts.jsonl, the flight recorder's and the trace's dumps,
 * the files `data prepare` and the exporters name inside their output
 * directory) are never reached through a symbolic link and never block,
 * and must be regular files (names the user gives as outputs still write
 * through a link to a regular file, above).
 * sr_fsio_atomic_write_own: as sr_fsio_atomic_write, but the temporary is
 * renamed onto `path` itself; anything but nothing or a regular file there
 * (a link included) is refused: sr_fsio_own_refused.
 * sr_fsio_open_own: read-only, O_NOFOLLOW | O_NONBLOCK, the descriptor
 * (blocking again), or -1 with errno: ENOENT when nothing is there,
 * EINVAL when it is not a regular file (*sb says what: a symbolic link, a
 * FIFO, a directory), another errno otherwise.
 * sr_fsio_open_append_own: appending (O_APPEND, created with
 * SR_FSIO_FILE_MODE), under the same rules; SR_ERR_CANTCREAT naming what
 * is there, SR_ERR_IO when out of descriptors.
 * sr_fsio_own_refused: records SR_ERR_CANTCREAT "PATH: KIND is there; ..."
 * and returns it. */
sr_status sr_fsio_atomic_write_own(const char *path, sr_fsio_writer write, void *ctx);
int sr_fsio_open_own(const char *path, struct stat *sb);
sr_status sr_fsio_open_append_own(const char *path, const char *what, int *fd);
sr_status sr_fsio_own_refused(const char *path, mode_t mode);

/* For a writer that prints: a stdio stream on a duplicate of its fd (NULL
 * with errno when none), and its close, which flushes: SR_OK, or
 * sr_fsio_write_error(name, ...) for a failed write. */
FILE *sr_fsio_stream(int fd);
sr_status sr_fsio_stream_close(FILE *f, const char *name);

/* The same in steps, for outputs written over a longer time or committed
 * together (`data prepare`'s shards appear only when all are written):
 * sr_fsio_stage checks the target and the guards and creates the
 * temporary (s->fd, to write); sr_fsio_stage_finish fsyncs and closes it
 * (still under its temporary name); sr_fsio_stage_commit finishes (if not
 * yet) and renames it into place, then fsyncs the directory;
 * sr_fsio_stage_abort closes and removes the temporary.  Every failure
 * leaves the temporary removed and the target untouched; statuses as
 * sr_fsio_atomic_write's. */
typedef struct {
    int fd;
    const char *path; /* as the user gave it: messages */
    char *tmp;
    int track; /* its handle in signals.h's registry of temporaries */
    char target[4096], dir[4096];
} sr_fsio_staged;
sr_status sr_fsio_stage(const char *path, sr_fsio_staged *s);
/* The same for a name the program chose (below): the file written is
 * `path` itself, never a link's target. */
sr_status sr_fsio_stage_own(const char *path, sr_fsio_staged *s);
sr_status sr_fsio_stage_finish(sr_fsio_staged *s);
sr_status sr_fsio_stage_commit(sr_fsio_staged *s);
void sr_fsio_stage_abort(sr_fsio_staged *s);

/* An appended output (the metrics file): opened write-only, created with
 * SR_FSIO_FILE_MODE, O_APPEND, never blocking; `truncate` empties a
 * regular file.  A directory, FIFO, socket or block device is refused
 * (SR_ERR_CANTCREAT naming `what`, the path and its kind); a character
 * device (/dev/null) is accepted.  *fd on success. */
sr_status sr_fsio_open_append(const char *path, const char *what, bool truncate, int *fd);

/* Inputs.  sr_fsio_open_input opens `path` read-only without blocking.
 * `stream` false (the file is mapped or seeked: model.init): only a
 * regular file.  `stream` true (read front to back: the job file, `data
 * prepare` inputs, a metrics file, a tokenizer): also a FIFO, a pipe
 * (/dev/fd/N, `<(...)`) or a character device; a FIFO's descriptor is
 * made blocking and waits for its writer's first bytes (or its close).
 * Refused: SR_ERR_NOINPUT "PATH: cannot open WHAT: <errno>" or "PATH: WHAT
 * is KIND; expected ...", with `hint` (may be NULL) appended.  *fd and
 * *sb (what it is) on success. */
sr_status sr_fsio_open_input(const char *path, const char *what, bool stream, const char *hint, int *fd,
                             struct stat *sb);
/* The same, as a stdio stream ("rb"). */
sr_status sr_fsio_open_input_file(const char *path, const char *what, const char *hint, FILE **f);

#endif
