/* What speculation over one contiguous context (fx_spec, spec.c) and the serving engine's
 * speculation over many paged sequences (src/engine/) share, written once: the controller that
 * picks how many tokens to draft and switches speculation off while it does not pay, and the
 * acceptance of a verified batch's rows (spec.c tells the rules). */
#ifndef FX_SPEC_SPEC_H
#define FX_SPEC_SPEC_H

#include "ferrox.h"

/* The controller of one sequence. Times are what a step cost this sequence, in any unit that is
 * the same for plain and verify steps (fx_spec: seconds of its own steps; the engine: its share
 * of a batched step). */
struct fx_spec_ctl {
    struct fx_spec_params p;
    double kept, lost;         /* decayed kept drafts and rejections */
    double cost_row;           /* one more row's cost relative to a plain step */
    double t_plain;            /* a plain step's cost (decayed mean; 0: none yet) */
    double on_time, on_tokens; /* decayed cost and tokens of verify steps since switched on */
    int32_t on_steps;          /* verify steps since switched on */
    int32_t off_left;          /* tokens of plain decoding left while switched off */
    int32_t backoff;           /* the next off period */
    int32_t warmup;            /* plain steps still to measure before drafting */
    int32_t plain_pos;         /* the position of the last plain step */
    struct fx_spec_stats stats;
};

/* p must be valid (fx_spec_create's checks). cost_row: the first estimate of one more row's
 * relative cost (0: the default guess, refined by measurement). */
void fx_spec_ctl_init(struct fx_spec_ctl *c, const struct fx_spec_params *p, double cost_row);
/* Counts a step and returns how many tokens to draft for it at position pos (0: a plain step;
 * the caller clamps to its context and token limits). */
int32_t fx_spec_ctl_choose_k(struct fx_spec_ctl *c, int32_t pos);
/* After a plain step at pos that cost t. */
void fx_spec_ctl_plain(struct fx_spec_ctl *c, double t, int32_t pos);
/* After a verify step of n_draft (>= 1) drafts of which `kept` were kept (`rejected`: one was
 * not), yielding n_out tokens, that cost t (drafting included). */
void fx_spec_ctl_verify(struct fx_spec_ctl *c, int32_t n_draft, int32_t kept, bool rejected,
                        int32_t n_out, double t);

/* Receives row `row`'s token (row 0: the one after the last accepted token); setting *stop ends
 * the acceptance after it. */
typedef fx_status (*fx_spec_row_fn)(void *user, int32_t row, fx_token token, bool *stop,
                                    struct fx_error *err);

/* The acceptance of a verified batch: logits [n_draft + 1][n_vocab] are the rows of [last token,
 * draft[0..n_draft)]. Row by row, in order, the row's token is sampled (the draft's rule while a
 * draft is there, plain sampling for the last row), accepted into the sampler and handed to emit,
 * until a token differs from its draft, emit says stop, or the rows run out. *n_out: tokens
 * yielded; *n_kept: drafts kept; *rejected: a draft was not kept. On an error the tokens yielded
 * before it are counted. */
fx_status fx_spec_accept(struct fx_sampler *smp, const float *logits, int32_t n_vocab,
                         const fx_token *draft, int32_t n_draft, fx_spec_row_fn emit, void *user,
                         int32_t *n_out, int32_t *n_kept, bool *rejected, struct fx_error *err);

#endif
