/* ckpt_mem.c — the memory checkpoint tier (checkpoint.memory.*): a
 * checkpointer of its own (struct sr_ckpt with a tier) whose directory is
 * each node's memory directory (a tmpfs), written in the persistent
 * format with its checksums and commit protocol by the asynchronous save
 * (ckpt_async.c; the lead rank of each node commits in its own directory);
 * the replica of every shard file on a buddy rank of the next node, sent by
 * the writer thread over links of their own (a second comm_tcp transport,
 * never the collective queue); and the resume that takes the newest step
 * complete across the nodes' memory directories, fetching what a node lacks
 * from the node that holds it, before the persistent directory.
 *
 * Written by hand: no library here replicates a directory of files between
 * nodes.  Part of the ckpt module (ckpt.h, ckpt_impl.h); shardrun(1)
 * RESILIENCE and shardrun-checkpoint(5) describe the tier. */
#include "srconfig.h"

#include "ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "clock.h"
#include "comm_tcp.h"
#include "fsio.h"
#include "line.h"
#include "mem.h"
#include "shardfile.h"
#include "testhook.h"

#define TIER_STEPS 4           /* memory steps a node reports at resume (it keeps 2) */
#define TIER_MAX_FILES 4096    /* shard indices the tier handles (their bitmap) */
#define XFER_MAGIC 0x53524d31u /* "SRM1" */

struct ckpt_tier {
    sr_ckpt_opts o;          /* the job's policy with keep 2 and async on */
    int node, nnodes;        /* this rank's node in the tier's numbering */
    int *node_of;            /* per world rank */
    int *lead_of_node;       /* per node: its first world rank */
    char (*names)[64];       /* per node: its name (messages) */
    int buddy_out, buddy_in; /* the replica's receiver and sender (-1: none) */
    sr_tcp *tcp;             /* the tier's own links (NULL: one node) */
    sr_ckpt *persist;        /* the persistent checkpointer: its lineage and data go in every manifest */
};

/* Frame numbers both ends compute alike: a save's exchanges from its step,
 * a fetch's from the transfer's index in the plan (a failed save leaves no
 * count behind to drift). */
static uint32_t save_seq(int64_t step, int64_t round) {
    return (uint32_t)((uint64_t)step * 1000003u + (uint64_t)round);
}
static uint32_t fetch_seq(int item, uint64_t chunk) { return 0x80000000u + (uint32_t)item * 65536u + (uint32_t)chunk; }

/* One node's memory steps at resume: per step its id (SHA-256 of every
 * file's digests) and a bitmap of the shard files present and verified. */
typedef struct {
    int32_t nsteps, pad;
    int64_t step[TIER_STEPS];
    int32_t nfiles[TIER_STEPS];
    unsigned char id[TIER_STEPS][32];
    unsigned char have[TIER_STEPS][TIER_MAX_FILES / 8];
} inventory;

/* A replica's or a fetched file's header on the tier's links. */
typedef struct {
    uint32_t magic;
    int32_t shard; /* -1: nothing; -2: the manifest */
    uint64_t bytes, nchunks;
    int64_t step;
} xfer_head;

/* The bytes of chunk i of a file of `bytes` (0 past its end). */
static size_t chunk_len(uint64_t bytes, uint64_t i) {
    uint64_t off = i * SR_SHARD_CHUNK_BYTES;
    return off >= bytes ? 0 : (size_t)(bytes - off < SR_SHARD_CHUNK_BYTES ? bytes - off : SR_SHARD_CHUNK_BYTES);
}

static bool bit(const unsigned char *b, int i) { return (b[i / 8] >> (i % 8)) & 1; }
static void set_bit(unsigned char *b, int i) { b[i / 8] |= (unsigned char)(1u << (i % 8)); }

/* ------------------------------------------------------------------------ */
/* the nodes, the buddies, the directory */

/* Every rank's node: the world's node id, or SHARDRUN_TEST_NODE_RANKS=K's
 * blocks of K ranks (the test suite's nodes under one mpirun). */
static sr_status number_nodes(sr_ckpt *c, struct ckpt_tier *t, char *node_name, size_t nn) {
    const sr_world *w = c->w;
    int64_t k = sr_testhook()->node_ranks;
    int mine[2] = {k > 0 ? (int)(w->rank / k) : w->node_id, 0};
    t->node_of = sr_calloc((size_t)w->size, sizeof(int));
    int *pairs = sr_calloc((size_t)w->size * 2, sizeof(int));
    if (!t->node_of || !pairs) {
        free(pairs);
        return sr_error_oom("the memory tier's node table");
    }
    sr_status st = sr_ctl_allgather(c->ctl, pairs, mine, sizeof mine);
    /* nodes renumbered 0.. in the order of their first rank */
    t->nnodes = 0;
    for (int r = 0; st == SR_OK && r < w->size; r++) {
        int n = -1;
        for (int q = 0; q < r && n < 0; q++)
            if (pairs[2 * q] == pairs[2 * r])
                n = t->node_of[q];
        t->node_of[r] = n >= 0 ? n : t->nnodes++;
    }
    free(pairs);
    if (st != SR_OK)
        return st;
    t->node = t->node_of[w->rank];
    t->lead_of_node = sr_calloc((size_t)t->nnodes, sizeof(int));
    t->names = sr_calloc((size_t)t->nnodes, sizeof *t->names);
    char(*all)[64] = sr_calloc((size_t)w->size, sizeof *all);
    if (!t->lead_of_node || !t->names || !all) {
        free(all);
        return sr_error_oom("the memory tier's node table");
    }
    char me[64];
    if (k > 0)
        sr_fmt(me, sizeof me, "node%d", t->node);
    else
        sr_fmt(me, sizeof me, "%s", w->host);
    st = sr_ctl_allgather(c->ctl, all, me, sizeof me);
    for (int n = 0; n < t->nnodes; n++)
        t->lead_of_node[n] = -1;
    for (int r = w->size - 1; st == SR_OK && r >= 0; r--) {
        t->lead_of_node[t->node_of[r]] = r;
        memcpy(t->names[t->node_of[r]], all[r], sizeof all[r]);
        t->names[t->node_of[r]][63] = '\0';
    }
    free(all);
    c->lead = t->lead_of_node[t->node] == w->rank;
    sr_fmt(node_name, nn, "%s", me);
    return st;
}

/* The buddies: the rank of the same position on the next node receives
 * this rank's replica, the one on the previous node sends its own.  Needs
 * the same number of ranks on every node (else no replicas, said once). */
static void pick_buddies(sr_ckpt *c, struct ckpt_tier *t) {
    const sr_world *w = c->w;
    t->buddy_out = t->buddy_in = -1;
    int per = 0, pos = 0;
    for (int r = 0; r < w->size; r++) {
        per += t->node_of[r] == 0;
        pos += t->node_of[r] == t->node && r < w->rank;
    }
    for (int n = 0; n < t->nnodes; n++) {
        int cnt = 0;
        for (int r = 0; r < w->size; r++)
            cnt += t->node_of[r] == n;
        if (cnt != per) {
            if (w->rank == 0)
                sr_log_warn("checkpoint.memory.replicas: node %s runs %d rank%s, node %s %d: replicas need the same "
                            "number on every node; the memory tier keeps no replica (a lost node's memory copy is "
                            "lost with it)",
                            t->names[0], per, per == 1 ? "" : "s", t->names[n], cnt);
            return;
        }
    }
    int next = (t->node + 1) % t->nnodes, prev = (t->node + t->nnodes - 1) % t->nnodes;
    for (int r = 0, a = 0, b = 0; r < w->size; r++) {
        if (t->node_of[r] == next && a++ == pos)
            t->buddy_out = r;
        if (t->node_of[r] == prev && b++ == pos)
            t->buddy_in = r;
    }
}

/* The lead's half of opening: the directory made 0700 (parents as mkdir
 * -p), refused when it is not a real directory of this user's, leftovers
 * of interrupted saves and fetches removed. */
static sr_status open_dir_lead(sr_ckpt *c) {
    char parent[PATH_MAX];
    sr_fsio_parent(c->dir, parent, sizeof parent);
    if (sr_fsio_mkdir_p(parent) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create checkpoint.memory.dir's parent: %s", parent,
                        strerror(errno));
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create checkpoint.memory.dir: %s", c->dir, strerror(errno));
    struct stat sb;
    if (lstat(c->dir, &sb) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: %s", c->dir, strerror(errno));
    /* never checkpoint.dir, inside it or around it: the tier's retention
     * and its removal at the end would take the persistent checkpoints */
    char *real = realpath(c->dir, NULL);
    const char *pd = c->tier->persist->dir;
    size_t lr = real ? strlen(real) : 0, lp = pd ? strlen(pd) : 0;
    bool nested = real && pd &&
                  ((lr <= lp && strncmp(real, pd, lr) == 0 && (pd[lr] == '/' || pd[lr] == '\0' || lr == 1)) ||
                   (lp <= lr && strncmp(real, pd, lp) == 0 && (real[lp] == '/' || real[lp] == '\0' || lp == 1)));
    free(real);
    if (nested)
        return sr_error(SR_ERR_CANTCREAT,
                        "checkpoint.memory.dir %s is checkpoint.dir %s, inside it or around it: the memory tier keeps "
                        "2 steps and removes its directory at the end (hint: a directory of its own, e.g. the "
                        "default /dev/shm/shardrun-%%u-%%j)",
                        c->dir, pd);
    if (!S_ISDIR(sb.st_mode))
        return sr_error(SR_ERR_CANTCREAT, "checkpoint.memory.dir %s is %s, not a directory (hint: remove it)", c->dir,
                        sr_fsio_kind(sb.st_mode));
    if (sb.st_uid != geteuid()) {
        struct passwd *pw = getpwuid(sb.st_uid);
        return sr_error(SR_ERR_CANTCREAT,
                        "checkpoint.memory.dir %s belongs to %s (uid %u), not to this user (uid %u): it is never "
                        "written or read (hint: a directory of your own, e.g. with %%u in checkpoint.memory.dir)",
                        c->dir, pw ? pw->pw_name : "another user", (unsigned)sb.st_uid, (unsigned)geteuid());
    }
    if ((sb.st_mode & 077) && chmod(c->dir, 0700) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot make it private (0700): %s", c->dir, strerror(errno));
    c->dirfd = sr_fsio_open_dir(c->dir);
    struct stat fb;
    if (c->dirfd < 0 || fstat(c->dirfd, &fb) != 0 || fb.st_ino != sb.st_ino || fb.st_dev != sb.st_dev)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot open checkpoint.memory.dir: %s", c->dir,
                        c->dirfd < 0 ? strerror(errno) : "it changed while it was checked");
    /* leftovers: interrupted saves, and interrupted fetches' .NAME.part */
    DIR *d = sr_fsio_list_dir(c->dirfd);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, ".step_", 6) == 0)
            ckpt_remove_step_dir(c, de->d_name, ckpt_written_by_save, NULL);
        int sub = strncmp(de->d_name, "step_", 5) == 0 ? sr_fsio_open_subdir(c->dirfd, de->d_name) : -1;
        DIR *sd = sub >= 0 ? fdopendir(sub) : NULL;
        struct dirent *e;
        while (sd && (e = readdir(sd)))
            if (e->d_name[0] == '.' && strstr(e->d_name, ".part"))
                unlinkat(sub, e->d_name, 0);
        if (sd)
            closedir(sd);
        else if (sub >= 0)
            close(sub);
    }
    if (d)
        closedir(d);
    return SR_OK;
}

static void tier_off(sr_ckpt *c, const char *why) {
    if (sr_ctl_rank(c->ctl) == 0)
        sr_log_warn("memory tier: %s: the memory tier is off for this run (checkpoint.dir still applies)", why);
    ckpt_pending_free(c);
    free(c->dir);
    c->dir = NULL;
}

/* The lead makes (or checks) the directory, the others open it; a
 * directory the tier may not use is one warning and the tier off. */
static sr_status open_dir_agreed(sr_ckpt *c, bool *off) {
    sr_status st = c->lead ? open_dir_lead(c) : SR_OK;
    st = sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK && !c->lead) { /* the lead made it */
        c->dirfd = sr_fsio_open_dir(c->dir);
        sr_status mine = c->dirfd >= 0 ? SR_OK
                                       : sr_error(SR_ERR_CANTCREAT, "%s: cannot open checkpoint.memory.dir: %s", c->dir,
                                                  strerror(errno));
        st = sr_ctl_agree(c->ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    } else if (st == SR_OK) {
        st = sr_ctl_agree(c->ctl, SR_OK, 0, 0, NULL, NULL);
    }
    *off = st != SR_OK && st != SR_ERR_PEER;
    if (*off)
        tier_off(c, sr_error_message());
    return *off ? SR_OK : st;
}

/* The tier's own links (more than one node): to the buddies now, to the
 * fetch's peers at resume. */
static sr_status open_links(sr_ckpt *c, struct ckpt_tier *t, const sr_transport_opts *tp) {
    sr_transport_opts to = *tp;
    to.key = "shardrun.memtier";
    sr_status st = sr_tcp_open(&t->tcp, (sr_world *)c->w, &to);
    if (st == SR_OK && t->buddy_out >= 0) {
        sr_tcp_need(t->tcp, t->buddy_out);
        sr_tcp_need(t->tcp, t->buddy_in);
    }
    st = sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = sr_tcp_connect(t->tcp);
    return sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
}

sr_status sr_ckpt_mem_open(sr_ckpt **out, sr_ckpt *persist, const sr_transport_opts *tp) {
    *out = NULL;
    const sr_ckpt_opts *o = persist->o;
    const sr_world *w = persist->w;
    sr_ckpt *c = sr_calloc(1, sizeof *c);
    struct ckpt_tier *t = sr_calloc(1, sizeof *t);
    if (!c || !t) {
        free(c);
        free(t);
        return sr_error_oom("the memory tier");
    }
    t->o = *o;
    t->o.keep = 2;
    t->o.keep_every = 0;
    t->o.async = true;
    t->o.dir = o->mem_dir;
    t->persist = persist;
    *c = (sr_ckpt){.o = &t->o,
                   .w = w,
                   .ctl = persist->ctl,
                   .model = persist->model,
                   .f = persist->f,
                   .dirfd = -1,
                   .lock_fd = -1,
                   .last_step = -1,
                   .tier = t};
    t->buddy_out = t->buddy_in = -1;
    *out = persist->memtier = c;
    if (o->mem_every <= 0 || !persist->dir)
        return SR_OK;
    char node[64], dir[PATH_MAX], user[64];
    sr_status st = number_nodes(c, t, node, sizeof node);
    if (st != SR_OK)
        return st;
    struct passwd *pw = getpwuid(geteuid());
    sr_fmt(user, sizeof user, "%s", pw ? pw->pw_name : "");
    if (!pw)
        sr_fmt(user, sizeof user, "%u", (unsigned)geteuid());
    const sr_path_vars v = {.host = w->host, .node = node, .job = w->job_id, .user = user};
    st = sr_fsio_expand("checkpoint.memory.dir", o->mem_dir, &v, dir, sizeof dir);
    st = sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL); /* names differ per node */
    if (st != SR_OK)
        return st;
    if (!(c->dir = sr_strdup(dir)))
        return sr_error_oom("the memory tier's directory name");
    sr_fsdp_layout l;
    sr_fsdp_layout_get(c->f, &l);
    if (l.mesh->S > TIER_MAX_FILES) {
        char why[160];
        sr_fmt(why, sizeof why, "%d shard indices, above the %d it handles", l.mesh->S, TIER_MAX_FILES);
        tier_off(c, why);
        return SR_OK;
    }
    bool off = false;
    if ((st = open_dir_agreed(c, &off)) != SR_OK || off)
        return st;
    st = ckpt_setup_async(c);
    if (st == SR_ERR_PEER)
        return st;
    if (st != SR_OK || !c->async) {
        tier_off(c, st != SR_OK
                        ? sr_error_message()
                        : "its snapshot does not fit checkpoint.async_max_mb (hint: raise it, or use more ranks)");
        return SR_OK;
    }
    bool want = o->mem_replicas < 0 ? t->nnodes > 1 : o->mem_replicas > 0;
    if (want && t->nnodes > 1)
        pick_buddies(c, t);
    else if (want && w->rank == 0)
        sr_log_warn("checkpoint.memory.replicas: 1, but the job runs on one node: no replica is kept");
    if (t->nnodes > 1 && (st = open_links(c, t, tp)) != SR_OK)
        return st;
    if (w->rank == 0)
        sr_log_info("memory tier: every %lld steps into %s on each node (0700), %s; at most 2 kept",
                    (long long)o->mem_every, c->dir,
                    t->buddy_out >= 0 ? "a replica of every shard on the next node" : "no replica");
    return SR_OK;
}

static sr_status mem_poll(sr_ckpt *c, int64_t now_step, bool wait);

uint64_t sr_ckpt_mem_host_bytes(const sr_ckpt_opts *o, uint64_t state_bytes, int local_size, int nodes,
                                uint64_t *tmpfs) {
    *tmpfs = 0;
    if (o->mem_every <= 0 || !o->dir || !o->dir[0])
        return 0;
    sr_ckpt_opts t = *o; /* the tier's own rule: asynchronous, in its directory */
    t.async = true;
    uint64_t snap = 0;
    if (!sr_ckpt_snapshot_fits(&t, state_bytes, local_size, &snap))
        return 0; /* the tier turns itself off */
    bool replica = o->mem_replicas < 0 ? nodes > 1 : o->mem_replicas > 0 && nodes > 1;
    uint64_t file = SR_SHARD_HEADER_BYTES + snap;
    *tmpfs = 3 * file * (replica ? 2 : 1); /* 2 kept and the one being written */
    return snap;
}

static bool mem_on(const sr_ckpt *c) { return c && c->tier && c->dir; }

static bool mem_due(const sr_ckpt *c, int64_t steps_done) { return mem_on(c) && steps_done % c->o->mem_every == 0; }

/* ------------------------------------------------------------------------ */
/* saving: the replica exchange on the writer thread */

/* SHA-256 of a whole chunk into out. */
static void chunk_sha(const void *p, size_t n, unsigned char out[32]) { sr_sha256(p, n, out); }

void ckpt_tier_replicate(sr_ckpt *c, int64_t step, const char *tmp, int64_t rounds, unsigned char *mine) {
    struct ckpt_tier *t = c->tier;
    sr_ctl_word *me = (sr_ctl_word *)mine;
    if (!t->tcp || t->buddy_out < 0)
        return;
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    bool have = s.mesh->rep_idx == 0 && me->status == SR_OK;
    xfer_head h = {XFER_MAGIC, have ? s.mesh->shard_idx : -1, have ? me->value : 0, 0, step}, in = {0};
    h.nchunks = (h.bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
    char msg[512] = "", path[PATH_MAX], rpath[PATH_MAX];
    int fd = -1, rfd = -1;
    unsigned char *sbuf = NULL, *rbuf = NULL, *rsha = NULL;
    sr_status st = SR_OK, rst = SR_OK; /* rst: this rank's replica of the buddy's file */
    const unsigned char *digests = mine + sizeof(sr_ctl_word);
    st = sr_tcp_exchange(t->tcp, t->buddy_out, t->buddy_in, save_seq(step, 0), &h, sizeof h, &in, sizeof in, msg,
                         sizeof msg);
    if (st == SR_OK && (in.magic != XFER_MAGIC || in.step != step || in.nchunks > (uint64_t)rounds))
        st = sr_error(SR_ERR_PEER, "rank %d sent a replica header of another save", t->buddy_in);
    if (st == SR_OK) {
        rsha = sr_malloc(in.nchunks * 32 + 1);
        sbuf = sr_malloc(SR_SHARD_CHUNK_BYTES);
        rbuf = sr_malloc(SR_SHARD_CHUNK_BYTES);
        if (!rsha || !sbuf || !rbuf)
            st = sr_error_oom("the replica buffers");
    }
    if (st == SR_OK)
        st = sr_tcp_exchange(t->tcp, t->buddy_out, t->buddy_in, save_seq(step, 1), digests, h.nchunks * 32, rsha,
                             in.nchunks * 32, msg, sizeof msg);
    if (st == SR_OK && h.shard >= 0) {
        FMT(path, "%s/shard_%05d.bin", tmp, h.shard);
        fd = open(path, O_RDONLY | O_CLOEXEC); /* -1: zeros are sent, the buddy's check fails them */
    }
    if (st == SR_OK && in.shard >= 0) {
        FMT(rpath, "%s/shard_%05d.bin", tmp, in.shard);
        rfd = open(rpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (rfd < 0)
            rst = sr_fsio_create_error_ckpt(rpath, errno);
    }
    for (int64_t i = 0; st == SR_OK && i < rounds; i++) {
        uint64_t off = (uint64_t)i * SR_SHARD_CHUNK_BYTES;
        size_t sn = chunk_len(h.bytes, (uint64_t)i), rn = chunk_len(in.bytes, (uint64_t)i);
        if (sn && (fd < 0 || sr_fsio_pread_all(fd, sbuf, sn, off) != 0))
            memset(sbuf, 0, sn);
        st = sr_tcp_exchange(t->tcp, t->buddy_out, t->buddy_in, save_seq(step, 2 + i), sbuf, sn, rbuf, rn, msg,
                             sizeof msg);
        if (st != SR_OK || rn == 0 || rst != SR_OK)
            continue;
        unsigned char d[32];
        chunk_sha(rbuf, rn, d);
        if (memcmp(d, rsha + 32 * i, 32) != 0)
            rst = sr_error(SR_ERR_DATA, "%s: the replica from rank %d fails its SHA-256 (chunk %lld)", rpath,
                           t->buddy_in, (long long)i);
        else if (sr_fsio_write_all(rfd, rbuf, rn) != 0)
            rst = sr_fsio_write_error_ckpt(rpath, errno);
    }
    if (st != SR_OK) /* the save fails (a warning); a lost peer ends the run through the collectives */
        st = sr_error(SR_ERR_IO, "the memory tier's link to rank %d or %d: %s", t->buddy_out, t->buddy_in,
                      msg[0] ? msg : sr_error_message());
    if (fd >= 0)
        close(fd);
    if (rfd >= 0 && close(rfd) != 0 && rst == SR_OK)
        rst = sr_fsio_write_error_ckpt(rpath, errno);
    if (st == SR_OK)
        st = rst;
    if (st != SR_OK && me->status == SR_OK) {
        me->status = (int32_t)st;
        FMT(me->msg, "%s", sr_error_message());
    }
    free(sbuf);
    free(rbuf);
    free(rsha);
}

void ckpt_tier_committed(sr_ckpt *c, int64_t step, int64_t now_step, uint64_t total, double snap, double write,
                         double took) {
    struct ckpt_tier *t = c->tier;
    ckpt_crash_site("memory_committed", step);
    sr_log_info("memory tier: step %lld saved in %s on %d node%s%s (committed at step %lld): %.1f MB; training "
                "stalled %.3f s for the snapshot, the write%s took %.2f s, %.2f s from start to commit",
                (long long)step, c->dir, t->nnodes, t->nnodes == 1 ? "" : "s",
                t->buddy_out >= 0 ? ", each shard also on the next node" : "", (long long)now_step, (double)total / 1e6,
                snap, t->buddy_out >= 0 ? " and the replica" : "", write, took);
}

static sr_status mem_save(sr_ckpt *c, const sr_ckpt_progress *p, double *stall_s) {
    if (stall_s)
        *stall_s = 0;
    if (!mem_on(c))
        return SR_OK;
    double t0 = sr_clock_mono_s();
    if (c->pend) { /* every K steps: the save still in flight is waited for (a stall, said and counted) */
        int64_t prev = sr_ckpt_pending_step(c);
        sr_status st = mem_poll(c, p->step, true);
        if (st != SR_OK)
            return st;
        if (sr_ctl_rank(c->ctl) == 0)
            sr_log_info("memory tier: step %lld is due while step %lld was still being written: waited %.2f s for it",
                        (long long)p->step, (long long)prev, sr_clock_mono_s() - t0);
    }
    const sr_ckpt *pc = c->tier->persist; /* this save's lineage and data are the persistent ones' */
    c->data = pc->data;
    c->data_allow_changed = pc->data_allow_changed;
    sr_ckpt_set_init(c, pc->init_path, pc->init_sha256);
    sr_status st = sr_ckpt_save_async(c, p, NULL);
    if (stall_s)
        *stall_s = sr_clock_mono_s() - t0;
    if (st == SR_ERR_PEER)
        return st;
    if (st != SR_OK && sr_ctl_rank(c->ctl) == 0)
        sr_log_warn("memory tier: step %lld not saved: %s (the persistent checkpoints are unaffected)",
                    (long long)p->step, sr_error_message());
    return SR_OK;
}

static sr_status mem_poll(sr_ckpt *c, int64_t now_step, bool wait) {
    if (!mem_on(c) || !c->pend)
        return SR_OK;
    int64_t step = sr_ckpt_pending_step(c);
    sr_status st = sr_ckpt_poll(c, now_step, wait);
    if (st == SR_ERR_PEER)
        return st;
    if (st != SR_OK && sr_ctl_rank(c->ctl) == 0)
        sr_log_warn("memory tier: step %lld not saved: %s (the persistent checkpoints are unaffected)", (long long)step,
                    sr_error_message());
    return SR_OK;
}

sr_status sr_ckpt_mem_step(sr_ckpt *c, const sr_ckpt_progress *p) {
    sr_status st = mem_poll(c, p->step, false);
    if (st == SR_OK && mem_due(c, p->step))
        st = mem_save(c, p, NULL);
    return st;
}

/* The names the memory directory holds (its removal at the end). */
static bool tier_owned(const char *name, void *ctx) {
    (void)ctx;
    return ckpt_written_by_save(name, NULL) || (name[0] == '.' && strstr(name, ".part"));
}

sr_status sr_ckpt_mem_remove(sr_ckpt *c) {
    if (!mem_on(c))
        return SR_OK;
    ckpt_pending_free(c); /* this rank's writer; the agreement: every rank's */
    sr_status st = sr_ctl_agree(c->ctl, SR_OK, 0, 0, NULL, NULL);
    if (st == SR_OK && c->lead) {
        DIR *d = sr_fsio_list_dir(c->dirfd);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (strncmp(de->d_name, "step_", 5) == 0 || strncmp(de->d_name, ".step_", 6) == 0)
                ckpt_remove_step_dir(c, de->d_name, tier_owned, NULL);
        if (d)
            closedir(d);
        if (rmdir(c->dir) != 0)
            sr_log_warn("memory tier: cannot remove %s: %s", c->dir, strerror(errno));
    }
    if (st == SR_OK)
        st = sr_ctl_agree(c->ctl, SR_OK, 0, 0, NULL, NULL);
    if (st == SR_OK && sr_ctl_rank(c->ctl) == 0)
        sr_log_info("memory tier: the job's last step is done: removed checkpoint.memory.dir on every node (%s here)",
                    c->dir);
    return st;
}

void ckpt_tier_free(sr_ckpt *c) {
    struct ckpt_tier *t = c->tier;
    if (!t)
        return;
    if (t->tcp) /* a writer blocked on a lost buddy fails at its next poll */
        sr_tcp_stop(t->tcp);
    ckpt_pending_free(c);
    if (t->tcp)
        sr_tcp_close(t->tcp);
    free(t->node_of);
    free(t->lead_of_node);
    free(t->names);
    free(t);
    c->tier = NULL;
}

/* ------------------------------------------------------------------------ */
/* resuming: the inventory of every node, the fetch, the load */

/* The lead's inventory of its node's memory directory: the newest
 * TIER_STEPS committed steps, each file verified chunk by chunk; a file
 * that fails is named in a warning and left out. */
static void take_inventory(sr_ckpt *c, inventory *inv) {
    memset(inv, 0, sizeof *inv);
    int64_t *steps = sr_calloc(MAX_CANDIDATES, sizeof *steps); /* sorted newest first, then the first few */
    int n = steps ? sr_ckpt_scan(c->dirfd, steps, MAX_CANDIDATES, NULL, 0) : 0;
    for (int i = 0; i < n && inv->nsteps < TIER_STEPS; i++) {
        char name[32], path[PATH_MAX];
        FMT(name, "step_%08lld", (long long)steps[i]);
        FMT(path, "%s/%s", c->dir, name);
        int sub = sr_fsio_open_subdir(c->dirfd, name);
        sr_manifest mf;
        if (sub < 0 || sr_manifest_load(sub, path, &mf) != SR_OK) {
            sr_log_warn("memory tier: %s: %s: not used", path, sub < 0 ? strerror(errno) : sr_error_message());
            if (sub >= 0)
                close(sub);
            continue;
        }
        if (!sr_model_dims_same(&mf.dims, &c->model->d) || mf.nfiles > TIER_MAX_FILES) {
            sr_manifest_free(&mf);
            close(sub);
            continue;
        }
        int k = inv->nsteps++;
        inv->step[k] = mf.step;
        inv->nfiles[k] = mf.nfiles;
        unsigned char *all = sr_malloc(32 * (size_t)mf.nfiles + 1), *at = all;
        for (int fi = 0; fi < mf.nfiles; fi++) {
            const sr_manifest_file *f = &mf.files[fi];
            if (all) {
                sr_sha256(f->sha, 32 * (size_t)f->nchunks, at);
                at += 32;
            }
            struct stat sb;
            if (fstatat(sub, f->name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
                continue; /* another node's file */
            char fp[PATH_MAX];
            FMT(fp, "%s/%s", path, f->name);
            sr_shardfile_expect x = {f->shard,    mf.step,    f->bytes,
                                     f->elements, f->nchunks, (const unsigned char(*)[32])f->sha};
            uint64_t verified = 0;
            if (sr_shardfile_read(sub, f->name, fp, &x, NULL, 0, &verified, NULL, NULL, NULL) == SR_OK)
                set_bit(inv->have[k], f->shard);
            else
                sr_log_warn("memory tier: %s: not used: %s", fp, sr_error_message());
        }
        if (all)
            sr_sha256(all, 32 * (size_t)mf.nfiles, inv->id[k]);
        free(all);
        sr_manifest_free(&mf);
        close(sub);
    }
    free(steps);
}

/* One transfer of the fetch: file `shard` (-2: the manifest) of `step`
 * from world rank `from` to world rank `to`. */
typedef struct {
    int shard, from, to;
} fetch_item;

static sr_status send_file(sr_ckpt *c, int peer, int item, int64_t step, const char *name, int shard) {
    struct ckpt_tier *t = c->tier;
    char path[PATH_MAX], msg[512] = "";
    FMT(path, "%s/step_%08lld/%s", c->dir, (long long)step, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    xfer_head h = {XFER_MAGIC, shard, 0, 0, step};
    if (fd >= 0 && fstat(fd, &sb) == 0)
        h.bytes = (uint64_t)sb.st_size;
    h.nchunks = (h.bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
    sr_status st = sr_tcp_send(t->tcp, peer, fetch_seq(item, 0), &h, sizeof h, msg, sizeof msg);
    unsigned char *buf = st == SR_OK && h.bytes ? sr_malloc(SR_SHARD_CHUNK_BYTES) : NULL;
    for (uint64_t i = 0; st == SR_OK && i < h.nchunks; i++) {
        size_t n = chunk_len(h.bytes, i);
        if (!buf)
            st = sr_error_oom("the fetch buffer");
        else {
            if (sr_fsio_pread_all(fd, buf, n, i * SR_SHARD_CHUNK_BYTES) != 0)
                memset(buf, 0, n); /* the receiver's verification fails it */
            st = sr_tcp_send(t->tcp, peer, fetch_seq(item, 1 + i), buf, n, msg, sizeof msg);
        }
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return st != SR_OK && msg[0] ? sr_error(st, "the memory tier's link: %s", msg) : st;
}

static sr_status recv_file(sr_ckpt *c, int peer, int item, int64_t step, const char *name) {
    struct ckpt_tier *t = c->tier;
    char dir[PATH_MAX], part[PATH_MAX], path[PATH_MAX], msg[512] = "";
    FMT(dir, "%s/step_%08lld", c->dir, (long long)step);
    FMT(part, "%s/.%s.part", dir, name);
    FMT(path, "%s/%s", dir, name);
    xfer_head h;
    sr_status st = sr_tcp_recv(t->tcp, peer, fetch_seq(item, 0), &h, sizeof h, msg, sizeof msg);
    if (st == SR_OK && (h.magic != XFER_MAGIC || h.step != step))
        st = sr_error(SR_ERR_PEER, "rank %d sent another file than %s", peer, name);
    sr_status wst = SR_OK; /* a local failure: the frames are still read, the streams stay in step */
    if (st == SR_OK && mkdir(dir, 0700) != 0 && errno != EEXIST)
        wst = sr_fsio_create_error_ckpt(dir, errno);
    int fd = st == SR_OK && wst == SR_OK ? open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (st == SR_OK && wst == SR_OK && fd < 0)
        wst = sr_fsio_create_error_ckpt(part, errno);
    unsigned char *buf = st == SR_OK && h.bytes ? sr_malloc(SR_SHARD_CHUNK_BYTES) : NULL;
    for (uint64_t i = 0; st == SR_OK && i < h.nchunks; i++) {
        size_t n = chunk_len(h.bytes, i);
        if (!buf)
            st = sr_error_oom("the fetch buffer");
        else
            st = sr_tcp_recv(t->tcp, peer, fetch_seq(item, 1 + i), buf, n, msg, sizeof msg);
        if (st == SR_OK && wst == SR_OK && sr_fsio_write_all(fd, buf, n) != 0)
            wst = sr_fsio_write_error_ckpt(part, errno);
    }
    free(buf);
    if (fd >= 0 && close(fd) != 0 && wst == SR_OK)
        wst = sr_fsio_write_error_ckpt(part, errno);
    if (st == SR_OK && wst == SR_OK && rename(part, path) != 0)
        wst = sr_fsio_create_error_ckpt(path, errno);
    if (st != SR_OK && msg[0])
        st = sr_error(st, "the memory tier's link: %s", msg);
    if (st == SR_OK && wst != SR_OK)
        unlink(part);
    return st == SR_OK ? wst : st; /* a write failure keeps the streams in step: only this rank fails */
}

/* Runs the transfers in their one global order: every rank takes its part
 * (send, receive or nothing) of each in turn, so the earliest unfinished
 * transfer always has both its ranks at it. */
static sr_status run_fetch(sr_ckpt *c, int64_t step, const fetch_item *items, int n, const char (*names)[32]) {
    struct ckpt_tier *t = c->tier;
    int me = c->w->rank;
    for (int i = 0; i < n; i++)
        if (items[i].from == me)
            sr_tcp_need(t->tcp, items[i].to);
        else if (items[i].to == me)
            sr_tcp_need(t->tcp, items[i].from);
    sr_status st = sr_ctl_agree(c->ctl, SR_OK, 0, 0, NULL, NULL);
    if (st == SR_OK)
        st = sr_tcp_connect(t->tcp);
    st = sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    sr_status mine = SR_OK;
    for (int i = 0; i < n && st == SR_OK; i++) {
        const char *name = items[i].shard == -2 ? SR_MANIFEST_NAME : names[items[i].shard];
        sr_status x = SR_OK;
        if (items[i].from == me)
            x = send_file(c, items[i].to, i, step, name, items[i].shard);
        else if (items[i].to == me)
            x = recv_file(c, items[i].from, i, step, name);
        if (x == SR_ERR_PEER || x == SR_ERR_INTERNAL)
            st = x; /* the streams are out of step */
        else if (x != SR_OK && mine == SR_OK)
            mine = x;
    }
    if (st == SR_OK)
        st = mine;
    return sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
}

/* Which files of the step's manifest (in this node's directory) this
 * rank's slices read, as a bitmap. */
static sr_status files_needed(sr_ckpt *c, int64_t step, unsigned char *need, char (*names)[32], int nfiles) {
    char name[32], path[PATH_MAX];
    FMT(name, "step_%08lld", (long long)step);
    FMT(path, "%s/%s", c->dir, name);
    int sub = sr_fsio_open_subdir(c->dirfd, name);
    sr_manifest mf;
    sr_status st = sub >= 0 ? sr_manifest_load(sub, path, &mf) : sr_error(SR_ERR_DATA, "%s: %s", path, strerror(errno));
    if (sub >= 0)
        close(sub);
    if (st != SR_OK)
        return st;
    sr_fsdp_layout l;
    sr_fsdp_layout_get(c->f, &l);
    for (int fi = 0; fi < mf.nfiles && fi < nfiles; fi++) {
        const sr_manifest_file *f = &mf.files[fi];
        FMT(names[f->shard], "%s", f->name);
        for (int s = 0; s < f->nslices; s++)
            for (int q = 0; q < l.nslices; q++) {
                uint64_t b = f->slices[s][0], e = b + f->slices[s][1];
                if (b < l.slices[q].end && l.slices[q].begin < e)
                    set_bit(need, f->shard);
            }
    }
    sr_manifest_free(&mf);
    return SR_OK;
}

/* Per node the slot of `step` (of save `id`) in its lead's inventory (or
 * -1), per file the first node holding it; *nfiles; returns a node that
 * has the step. */
static int plan_holders(const struct ckpt_tier *t, const inventory *all, int64_t step, const unsigned char *id,
                        int *slot, int *holder_of, int *nfiles) {
    int any = -1;
    for (int n = 0; n < t->nnodes; n++) {
        const inventory *v = &all[t->lead_of_node[n]];
        slot[n] = -1;
        for (int k = 0; k < v->nsteps; k++)
            if (v->step[k] == step && memcmp(v->id[k], id, 32) == 0) {
                slot[n] = k;
                *nfiles = v->nfiles[k];
            }
    }
    /* the holder of file f: the first node whose directory has it */
    for (int f = 0; f < *nfiles; f++) {
        holder_of[f] = -1;
        for (int n = 0; n < t->nnodes && holder_of[f] < 0; n++)
            if (slot[n] >= 0 && bit(all[t->lead_of_node[n]].have[slot[n]], f))
                holder_of[f] = n;
    }
    for (int n = 0; n < t->nnodes && any < 0; n++)
        if (slot[n] >= 0)
            any = n;
    return any;
}

/* Tries memory step `step` (complete across the inventories): the
 * manifest and the missing files fetched into each node's directory, then
 * the load from there.  The agreed status. */
static sr_status try_memory_step(sr_ckpt *c, sr_ckpt *m, int64_t step, const inventory *all, const unsigned char *id,
                                 sr_ckpt_progress *p, char *how, size_t how_len) {
    struct ckpt_tier *t = m->tier;
    const sr_world *w = m->w;
    int W = w->size, nfiles = 0;
    /* per node: the slot of this step in its lead's inventory, or -1 */
    int *slot = sr_calloc((size_t)t->nnodes, sizeof(int));
    fetch_item *items = sr_calloc((size_t)t->nnodes * (TIER_MAX_FILES + 1), sizeof *items);
    unsigned char *need = sr_calloc((size_t)W, TIER_MAX_FILES / 8);
    char(*names)[32] = sr_calloc(TIER_MAX_FILES, sizeof *names);
    if (!slot || !items || !need || !names) {
        free(slot), free(items), free(need), free(names);
        return sr_error_oom("the memory tier's fetch plan");
    }
    int holder_of[TIER_MAX_FILES], any = plan_holders(t, all, step, id, slot, holder_of, &nfiles);
    /* 1. the manifest to every node that lacks the step */
    int ni = 0;
    for (int n = 0; n < t->nnodes; n++)
        if (slot[n] < 0)
            items[ni++] = (fetch_item){-2, t->lead_of_node[any], t->lead_of_node[n]};
    sr_status st = ni ? run_fetch(m, step, items, ni, names) : SR_OK;
    /* 2. what this rank's slices read, gathered; each node's lead fetches
     * what its ranks read and its directory lacks */
    unsigned char mine[TIER_MAX_FILES / 8] = {0};
    sr_status x = st == SR_OK ? files_needed(m, step, mine, names, nfiles) : st;
    if (st == SR_OK)
        st = sr_ctl_agree(m->ctl, x, 0, 0, x == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = sr_ctl_allgather(m->ctl, need, mine, TIER_MAX_FILES / 8);
    ni = 0;
    int fetched = 0;
    for (int f = 0; st == SR_OK && f < nfiles; f++)
        for (int n = 0; n < t->nnodes; n++) {
            bool has = slot[n] >= 0 && bit(all[t->lead_of_node[n]].have[slot[n]], f), wants = false;
            for (int r = 0; r < W; r++)
                wants = wants || (t->node_of[r] == n && bit(need + (size_t)r * (TIER_MAX_FILES / 8), f));
            if (wants && !has) {
                items[ni++] = (fetch_item){f, t->lead_of_node[holder_of[f]], t->lead_of_node[n]};
                fetched++;
            }
        }
    if (st == SR_OK && ni)
        st = run_fetch(m, step, items, ni, names);
    /* where each file came from (rank 0's line) */
    if (st == SR_OK && w->rank == 0) {
        char line[4096];
        sr_line l = sr_line_on(line, sizeof line);
        for (int f = 0; f < nfiles; f++)
            sr_line_add(&l, "%s%s from %s", f ? ", " : "", names[f], t->names[holder_of[f]]);
        sr_log_info("resume: step %lld from the memory tier (each file from the first node whose memory holds it, "
                    "its own copy or its buddy's replica): %s; %d file%s fetched over the tier's links",
                    (long long)step, line, fetched, fetched == 1 ? "" : "s");
    }
    free(slot), free(items), free(need), free(names);
    if (st != SR_OK)
        return st;
    char name[32], path[PATH_MAX];
    FMT(name, "step_%08lld", (long long)step);
    FMT(path, "%s/%s", m->dir, name);
    int dirfd = sr_fsio_open_subdir(m->dirfd, name);
    bool any_shape = false;
    st = ckpt_load_agreed(c, path, dirfd, p, how, how_len, &any_shape);
    if (dirfd >= 0)
        close(dirfd);
    return st;
}

/* The first file of `step` (save `id`) in no node's directory, or -1:
 * the step is complete. */
static int first_missing(const struct ckpt_tier *t, const inventory *all, int64_t step, const unsigned char *id) {
    int nfiles = 0;
    unsigned char have[TIER_MAX_FILES / 8] = {0};
    for (int n = 0; n < t->nnodes; n++) {
        const inventory *v = &all[t->lead_of_node[n]];
        for (int k = 0; k < v->nsteps; k++)
            if (v->step[k] == step && memcmp(v->id[k], id, 32) == 0) {
                nfiles = v->nfiles[k];
                for (int b = 0; b < TIER_MAX_FILES / 8; b++)
                    have[b] |= v->have[k][b];
            }
    }
    for (int f = 0; f < nfiles; f++)
        if (!bit(have, f))
            return f;
    return -1;
}

sr_status sr_ckpt_resume_tiers(sr_ckpt *c, sr_ckpt *m, sr_ckpt_progress *p, char *how, size_t how_len) {
    const char *mode = c->o->resume && c->o->resume[0] ? c->o->resume : "auto";
    if (!mem_on(m) || strcmp(mode, "auto") != 0 || !c->dir)
        return sr_ckpt_resume(c, p, how, how_len);
    struct ckpt_tier *t = m->tier;
    int W = m->w->size;
    bool loaded_some = false;
    inventory mine, *all = sr_calloc((size_t)W, sizeof *all);
    if (!all)
        return sr_error_oom("the memory tier's inventories");
    memset(&mine, 0, sizeof mine);
    if (m->lead)
        take_inventory(m, &mine);
    sr_status st = sr_ctl_allgather(m->ctl, all, &mine, sizeof mine);
    /* the persistent directory's newest step (rank 0's scan) */
    int64_t newest[2] = {-1, 0};
    if (st == SR_OK && m->w->rank == 0) {
        int64_t *steps = sr_calloc(MAX_CANDIDATES, sizeof *steps); /* sorted before the first is taken */
        if (steps && sr_ckpt_scan(c->dirfd, steps, MAX_CANDIDATES, NULL, 0) > 0)
            newest[0] = steps[0];
        free(steps);
    }
    if (st == SR_OK)
        st = sr_ctl_broadcast(m->ctl, newest, 2, 0);
    /* the memory steps newer than it, newest first, each tried in turn */
    for (int guard = 0; st == SR_OK && guard < TIER_STEPS * t->nnodes; guard++) {
        int64_t best = -1;
        const unsigned char *id = NULL;
        for (int n = 0; n < t->nnodes; n++) {
            const inventory *v = &all[t->lead_of_node[n]];
            for (int k = 0; k < v->nsteps; k++)
                if (v->step[k] > newest[0] && v->step[k] > best) {
                    best = v->step[k];
                    id = v->id[k];
                }
        }
        if (best < 0)
            break;
        int missing = first_missing(t, all, best, id);
        sr_status tried = SR_OK;
        if (missing >= 0) {
            if (m->w->rank == 0)
                sr_log_warn("memory tier: step %lld is incomplete: shard_%05d.bin is in no memory directory of this "
                            "job's nodes that verifies (its node and its buddy's lost, or corrupt); trying the next "
                            "copy",
                            (long long)best, missing);
        } else {
            tried = try_memory_step(c, m, best, all, id, p, how, how_len);
            loaded_some = true; /* the state may hold part of it now */
            if (tried == SR_OK) {
                free(all);
                m->last_step = p->step;
                return sr_fsdp_state_loaded(c->f);
            }
            if (tried == SR_ERR_PEER || tried == SR_ERR_CONFIG || tried == SR_ERR_INTERNAL) {
                free(all);
                return tried;
            }
            if (m->w->rank == 0)
                sr_log_warn("memory tier: step %lld is unusable: %s; trying the next copy", (long long)best,
                            sr_error_message());
        }
        /* this step is out: drop it from every inventory */
        for (int r = 0; r < W; r++)
            for (int k = 0; k < all[r].nsteps; k++)
                if (all[r].step[k] == best)
                    all[r].step[k] = -1;
    }
    free(all);
    if (st != SR_OK)
        return st;
    st = sr_ckpt_resume(c, p, how, how_len);
    if (st == SR_OK && loaded_some && p->step == 0)
        return sr_error(SR_ERR_DATA,
                        "the memory tier's steps failed to load and %s holds no checkpoint: not starting fresh from a "
                        "partly loaded state (hint: checkpoint.resume: never starts fresh)",
                        c->dir);
    return st;
}
