/* Loading a checkpoint's model (see model_load.h). */
#include "train/model_load.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/check.h"

int gdn_model_load(const char *path, gdn_param_table *t, float **params, ckpt_info *info, char *err,
                   size_t err_len) {
    ckpt_info own;
    ckpt_info *in = info ? info : &own;
    if (ckpt_read_info(path, in, err, err_len)) return -1;
    char sub[1024];
    if (gdn_config_validate(&in->model, sub, sizeof sub)) {
        snprintf(err, err_len, "%s: the model configuration is invalid: %s", path, sub);
        ckpt_info_free(in);
        return -1;
    }
    gdn_param_table_build(t, &in->model);
    *params = GDN_MALLOC(t->total * sizeof **params);
    if (ckpt_load(path, &in->model, t, *params, NULL, NULL, NULL, err, err_len)) {
        free(*params);
        *params = NULL;
        gdn_param_table_free(t);
        ckpt_info_free(in);
        return -1;
    }
    if (!info) ckpt_info_free(in);
    return 0;
}
