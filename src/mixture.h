/* mixture.h — the training data as a run draws it: data.train (or the
 * embedded corpus) as one stream, or data.mixture's weighted sources, and
 * the schedule that says which source feeds each sequence of the global
 * data order.
 *
 * The schedule (shardrun.yaml(5) data.mixture; ARCHITECTURE.md §3) is a
 * smooth weighted round-robin over sequences: with weights w_k (shares
 * p_k = w_k / sum w) set when the global cursor was at `origin`, and d_k
 * the sequences source k has fed since then, the sequence at global index
 * origin + m - 1 comes from the source with the largest m p_k - d_k (the
 * one furthest behind its share; a tie goes to the first listed), so
 * each source's sequences are spread through the run, not in blocks
 * (tests/test_mixture.c: within two sequences of n p_k at every point of
 * its weight sets, 0.5 % over 10,000).  Source k's
 * j-th sequence is window perm(j) of its own shards, the seeded order of
 * data.h with the seed mixed with the source's name; j / its windows is
 * its epoch (data.mixture_end: wrap), or the source is exhausted (stop).
 *
 * The state (each source's cursor, the origin and each source's cursor
 * then: sr_mix_state, which checkpoints record) changes only between
 * steps, by whole global batches, so every rank of any world size draws
 * the same sequences for the same global indices. */
#ifndef SR_MIXTURE_H
#define SR_MIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "data.h"
#include "status.h"

/* Where a data.mixture stands (this module advances it; every checkpoint
 * records it): each source's cursor (its sequences consumed; its epoch is
 * cursor / its sequences per epoch), the weights, and where they were set
 * (the global cursor and each source's cursor then: the schedule's
 * origin).  n = 0: no mixture (data.train). */
#define SR_MIX_MAX_HISTORY 16
typedef struct {
    int n;
    struct {
        char name[SR_MIX_NAME_MAX + 1];
        uint64_t cursor, epoch, base; /* base: its cursor when the weights were set */
        double weight;
    } src[SR_MIX_MAX_SOURCES];
    uint64_t origin; /* the global cursor when the weights were set */
    /* each time the weights were set: the step, the global cursor, "NAME=W ..." */
    int nhistory;
    struct {
        int64_t step;
        uint64_t cursor;
        char weights[SR_MIX_MAX_SOURCES * (SR_MIX_NAME_MAX + 16)]; /* every source's NAME=%g fits */
    } history[SR_MIX_MAX_HISTORY];
} sr_mix_state;

typedef struct sr_mix sr_mix;

/* Opens the training data of `cfg` for windows of T + 1 tokens:
 * data.mixture's sources (each as sr_data_open; an error names the
 * source), else data.train, else the embedded corpus.  The state is the
 * fresh one (every cursor 0) until sr_mix_resume.  Free with
 * sr_mix_close. */
sr_status sr_mix_open(sr_mix **out, const sr_config *cfg, int T);
void sr_mix_close(sr_mix *m);

/* Whether the run trains on data.mixture (else one unnamed source). */
bool sr_mix_is_mixture(const sr_mix *m);
/* Sources (1 without data.mixture) and source k's shards and name ("" for
 * data.train). */
int sr_mix_count(const sr_mix *m);
const sr_data *sr_mix_data(const sr_mix *m, int k, const char **name);
/* One line per source for the run's banner into buf ("data.train: 2
 * shards, ..." or "web (weight 3, 75.0%): 2 shards, ..."), '\n' between. */
void sr_mix_describe(const sr_mix *m, char *buf, size_t n);

/* The state of a run that resumes at `step` with global cursor `cursor`
 * and the checkpoint's mixture state `prior` (prior->n = 0: a checkpoint
 * of one source; step 0: a fresh start).  Each source continues from its
 * recorded cursor (one the checkpoint lacks from 0); weights or sources
 * other than the checkpoint's start a new schedule at `cursor`, with a
 * warning naming the change (rank 0 says it), and a history entry.  Without
 * data.mixture: nothing. */
void sr_mix_resume(sr_mix *m, int64_t step, uint64_t cursor, const sr_mix_state *prior);

/* Fills inputs/targets [count, T] with the global batch's sequences
 * off .. off + count - 1, the batch (`batch` sequences) starting at global
 * cursor `cursor`, which must be where the state stands (the last
 * sr_mix_advance).  `seed`: train.seed.  Without data.mixture exactly
 * sr_data_batch(train, cursor + off, count, shuffle).  SR_ERR_INTERNAL
 * when out of memory (a batch larger than train.batch_size). */
sr_status sr_mix_batch(sr_mix *m, uint64_t cursor, uint64_t batch, uint64_t off, int count, uint64_t seed, int *inputs,
                       int *targets);
/* With data.mixture_end: stop, whether the batch at `cursor` needs a
 * sequence some source no longer has (*name: that source's).  Always false
 * with wrap or without data.mixture. */
bool sr_mix_exhausted(sr_mix *m, uint64_t cursor, uint64_t batch, const char **name);
/* The batch at `cursor` was trained: the state moves past it.
 * SR_ERR_INTERNAL when out of memory. */
sr_status sr_mix_advance(sr_mix *m, uint64_t cursor, uint64_t batch);

/* The state as checkpoints record it (n = 0 without data.mixture). */
void sr_mix_state_get(const sr_mix *m, sr_mix_state *out);
/* {"NAME": tokens consumed, ...} as JSON text into buf ("" without
 * data.mixture): the metrics records' tokens_by_source. */
void sr_mix_tokens_json(const sr_mix *m, char *buf, size_t n);

#endif
