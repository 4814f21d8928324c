/* Sequence parallelism for the CPU model (docs/design.md section 5): the hooks of gdn_seq_hooks
 * (model/seq_hooks.h) for the fp32 CPU model, over a gdn_comm sequence-parallel group. Rank
 * sp_rank holds the contiguous segment [sp_rank * T_seg, (sp_rank + 1) * T_seg) of every
 * sequence of the batch.
 *
 * Per GDN layer the convolution halo (the last W-1 pre-convolution rows of q, k, v) always
 * goes from each rank to the next (and its gradient back). The delta-rule state crosses the
 * boundaries in one of two ways:
 * - GDN_SP_PASS: the state is passed rank to rank (payload B*H*K*V per boundary); the ranks
 *   form a pipeline over the layers, rank r starting a layer's delta rule once rank r-1 has
 *   finished it. The backward pass runs the same way in reverse with the state gradient.
 * - GDN_SP_GATHER: every rank computes its segment's affine map (M, H) with
 *   gdn_delta_transition, the group all-gathers the maps (payload B*H*K*(K+V) per rank) and
 *   each rank folds those of the ranks before it into its entering state. Backward: each rank
 *   computes E (gdn_delta_transition_adjoint), the group all-gathers E (B*H*K*V per rank) and
 *   each rank folds M^T and E of the ranks after it, reusing the maps kept from the forward
 *   pass. More arithmetic, no serial chain across ranks.
 * docs/distributed.md compares the two; gdn train defaults to the measured faster one.
 *
 * Per attention layer (either mode) the group all-gathers every rank's keys and values (after
 * RoPE; 2*B*T_seg*C per rank, C = n_kv_heads * attn_head_dim) and each rank attends over those
 * of the ranks up to itself; backward, each rank's gradients of all segments' keys and values
 * (zeros for the later ones) are reduce-scattered, each rank keeping its own segment's sum.
 *
 * Documents (doc_prev): once per forward pass the group all-gathers each rank's last document
 * start per row (B int64), so that every rank knows where the document open at its first token
 * began: its convolution reads no halo row before that start and its attention no earlier key.
 * A start inside a segment needs nothing more: the state and the maps cut there (docs/design.md
 * section 3.8). */
#ifndef GDN_COMM_SEQPAR_H
#define GDN_COMM_SEQPAR_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/config.h"
#include "model/cpu/model_cpu.h"

typedef enum { GDN_SP_PASS, GDN_SP_GATHER } gdn_sp_exchange;

/* "pass" / "gather" <-> the enum; parse returns 0, or -1 for an unknown name. */
int gdn_sp_exchange_parse(const char *name, gdn_sp_exchange *out);
const char *gdn_sp_exchange_name(gdn_sp_exchange mode);

typedef struct gdn_seqpar gdn_seqpar;

/* Buffers for batches of B sequences of T_seg tokens per rank (T_seg >= conv_width - 1). */
gdn_seqpar *gdn_seqpar_create(gdn_comm *c, const gdn_config *cfg, int B, int T_seg, gdn_sp_exchange mode);
/* Completes pending sends and frees. */
void gdn_seqpar_free(gdn_seqpar *s);
/* The hooks (user = s) that make every later forward/backward of a CPU model made for B x T_seg
 * one segment of the group's sequences (gdn_cpu_acts_set_seq_hooks_f32, or the backend's
 * set_seq_hooks). s must outlive their use. */
gdn_seq_hooks gdn_seqpar_hooks(gdn_seqpar *s);

/* Payload bytes one rank sends per forward + backward pass of a micro-batch of B x T_seg tokens
 * per rank, from the shapes: the most any rank of the group sends (a middle rank when sp > 2),
 * all-gather contributions and reduce-scatter inputs included (comm/comm.h counts them so).
 * Forward only when with_backward is 0. */
uint64_t gdn_seqpar_bytes(const gdn_config *cfg, int B, int T_seg, int sp, gdn_sp_exchange mode,
                          int with_backward);

#endif
