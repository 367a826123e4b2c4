/* suggest.h — "did you mean": the closest of a list of names to a word a
 * user mistyped (a command, a subcommand, an option, a job-file key).
 *
 * suggest owns the distance (Levenshtein, case-insensitive; no library
 * here offers one) and the rule for when a name is close enough to
 * suggest: within 1 edit for words of up to 3 letters, 2 up to 6, 3
 * beyond.  Callers own their lists and their aliases (config's names other
 * trainers use, main's command words). */
#ifndef SR_SUGGEST_H
#define SR_SUGGEST_H

/* Edits (insert, delete, replace; case-insensitive) from a to b; 99 when
 * either is longer than 64 bytes. */
int sr_suggest_distance(const char *a, const char *b);
/* Whether `d` edits are close enough to suggest a name for `word`. */
int sr_suggest_close(const char *word, int d);
/* The closest name of names[0 .. n) to `word` when it is close enough
 * (the first of equals), else NULL. */
const char *sr_suggest(const char *word, const char *const *names, int n);

#endif
