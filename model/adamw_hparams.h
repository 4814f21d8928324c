/* AdamW's hyper-parameters for one step, shared by the CPU optimizer (train/optim.h) and the
 * CUDA one (model/cuda/ops_cuda.h). */
#ifndef GDN_MODEL_ADAMW_HPARAMS_H
#define GDN_MODEL_ADAMW_HPARAMS_H

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
} gdn_adamw_hparams;

#endif
