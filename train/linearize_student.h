/* The student gdn linearize --out writes (docs/distillation.md, "A student from the linearised
 * form"): the teacher with chosen softmax layers (A) turned into linearized layers (S) that
 * start from the balanced gated-delta-rule form, every tensor copied and the balance factors set. */
#ifndef GDN_TRAIN_LINEARIZE_STUDENT_H
#define GDN_TRAIN_LINEARIZE_STUDENT_H

#include "model/params.h"

/* Marks the layers of keep (a comma-separated list of layer indices, as gdn distill init
 * --keep-softmax takes) in kept [n_layers]. Returns 0, or -1 with a message naming the index in
 * err: not an integer, out of range, or not a softmax layer of the teacher. */
int lin_student_keep(const gdn_config *teacher, const char *keep, unsigned char *kept, char *err, size_t err_len);

/* The student's configuration: the teacher's with the layers of to_s [n_layers] (softmax layers
 * of the teacher) made S, the pattern the shortest that repeats to the layers (a length dividing
 * n_layers when one fits). Returns 0, or -1 with the reason in err. */
int lin_student_config(const gdn_config *teacher, const unsigned char *to_s, gdn_config *student, char *err,
                       size_t err_len);

/* The student's parameters sp [st->total]: every tensor of the teacher copied by name, and in
 * each S layer l attn.log_lambda[h] = ln lambda[l * n_heads + h]. */
void lin_student_params(const gdn_param_table *tt, const float *tp, const gdn_param_table *st, float *sp,
                        const double *lambda);

#endif
