/* Loading a checkpoint's model for the commands that only run it (gdn op logits, gdn eval). */
#ifndef GDN_TRAIN_MODEL_LOAD_H
#define GDN_TRAIN_MODEL_LOAD_H

#include "io/checkpoint.h"
#include "model/params.h"

/* Reads path's configuration (validated), builds its parameter table *t and loads its fp32
 * parameters into *params (malloced), each tensor's checksum verified. info (may be NULL)
 * receives the header: free it with ckpt_info_free. Returns 0, or -1 with a message naming
 * the file in err (nothing to free then). */
int gdn_model_load(const char *path, gdn_param_table *t, float **params, ckpt_info *info, char *err,
                   size_t err_len);

#endif
