/* prepare_impl.h — what the files of `data prepare` share (prepare.c:
 * reading, cutting and encoding documents; prepare_out.c: the shards they
 * are written to, the validation split, index.json): a batch of items and
 * the state of a run.  Internal to the prepare module. */
#ifndef SR_PREPARE_IMPL_H
#define SR_PREPARE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <zlib.h>

#include "fsio.h"
#include "prepare.h"
#include "tokenizer.h"

/* A piece of a document's text in a batch, and its ids once encoded. */
typedef struct {
    size_t off, len; /* in the batch's text */
    bool doc_start;
    sr_tok_ids ids;
} prep_item;

typedef struct {
    unsigned char *text;
    size_t n, cap;
    prep_item *items;
    size_t nitems, icap;
} prep_batch;

/* An input as zlib reads it. */
typedef struct {
    const char *path;
    gzFile gz;
    long line; /* JSON Lines: the line last read */
    bool eof;
    /* bytes read and not yet handed out (text files: the tail after the
     * last safe cut) */
    unsigned char *pend;
    size_t pn, pcap;
} prep_input;

/* The outputs' two streams: the training shards and the validation
 * shards.  Each has its own open shard and write buffer, so a document
 * goes whole to the set it was chosen for while both are written. */
enum { PREP_TRAIN, PREP_VAL, PREP_NSTREAMS };

typedef struct {
    int open;       /* its shard being written (an index of the shard arrays), -1: none */
    int number;     /* the next shard's number in its name */
    uint64_t quota; /* tokens the open shard takes */
    unsigned char *wbuf;
    size_t wn;
    uint64_t tokens;    /* written to this stream */
    uint64_t documents; /* begun in it */
    int shards;
} prep_stream;

typedef struct {
    const sr_prepare_opts *o;
    char *const *files;
    int nfiles;
    sr_prepare_result *r;
    sr_tokenizer *tok;
    int64_t doc_id; /* the separator, -1: none */
    int tok_bytes;  /* 2 or 4 */
    int64_t vocab;
    bool dir;
    char outdir[4096];
    const char *prefix;
    json_t *prior; /* --name: the output directory's index.json of the other sources, or NULL */
    /* reading */
    int file; /* the input being read */
    prep_input in;
    bool in_doc; /* a text file's document started (its first item written) */
    bool warned_cut;
    /* JSON Lines: the document being cut into items (its string inside
     * doc_obj), and how much of it is handed out */
    json_t *doc_obj;
    const unsigned char *doc;
    size_t doc_n, doc_off;
    uint64_t total_in, done_in; /* compressed bytes: progress */
    /* the shards, in the order they were opened (prepare_out.c) */
    prep_stream out[PREP_NSTREAMS];
    int cur; /* the stream the current document goes to */
    sr_fsio_staged *staged;
    char (*names)[4200];
    uint64_t *counts;
    unsigned char (*sha)[32];
    uint64_t *sizes;
    bool *val; /* the shard is a validation shard */
    int nshards, scap;
    /* progress */
    double t0, last_print;
    bool tty;
} prep_run;

/* prepare_out.c: the write buffers (false: out of memory). */
bool prep_out_init(prep_run *x);
/* A document starts (its index among the non-empty documents, in input
 * order): the stream it goes to (--val-fraction: validation when the hash
 * of (--seed, index) falls below the fraction). */
void prep_doc_begin(prep_run *x, uint64_t index);
/* One token id into the current document's stream (--val-tokens: the
 * validation stream until it holds that many), a new shard opened when
 * the open one is full. */
sr_status prep_emit(prep_run *x, uint32_t id);
/* Every shard closed and renamed into place, then index.json (a
 * directory); on an earlier failure `st`, or on its own, none of them. */
sr_status prep_commit(prep_run *x, sr_status st);
/* Frees the shard arrays and buffers. */
void prep_out_free(prep_run *x);

#endif
