/* The mapping of gdn checkpoints onto Hugging Face transformers architectures (docs/interop.md,
 * "Export"): which architecture a model exports as, its tensors under transformers' names and
 * layouts, and its config.json. gdn export (train/cmd_export.c) writes them to a directory. */
#ifndef GDN_TRAIN_EXPORT_HF_H
#define GDN_TRAIN_EXPORT_HF_H

#include <stddef.h>

#include "io/json.h"
#include "io/safetensors_write.h"
#include "model/config.h"
#include "model/params.h"

typedef enum { EXPORT_LLAMA, EXPORT_QWEN2, EXPORT_QWEN3, EXPORT_QWEN3_NEXT } export_arch;

/* "llama", "qwen2", "qwen3", "qwen3_next". */
const char *export_model_type(export_arch arch);

/* The architecture model c exports as: 0, or -1 with the reason it cannot be exported in err. */
int export_choose_arch(const gdn_config *c, export_arch *arch, char *err, size_t errlen);

/* Adds every tensor of the model (parameters P laid out by t) to w under transformers' names:
 * 0, or -1 with a message in err. */
int export_tensors(stw_writer *w, const gdn_param_table *t, const float *P, export_arch arch, char *err,
                   size_t errlen);

/* config.json of model c as arch, its tensors stored as dtype, as one JSON object into j. */
void export_config(io_jw *j, const gdn_config *c, export_arch arch, stw_dtype dtype);

#endif
