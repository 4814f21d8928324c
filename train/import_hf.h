/* gdn import: Hugging Face Llama, Qwen2 and Qwen3 decoders as gdn models of softmax-attention
 * layers (mixer A). train/import_config.c reads config.json; train/cmd_import.c the tensors. */
#ifndef GDN_TRAIN_IMPORT_HF_H
#define GDN_TRAIN_IMPORT_HF_H

#include "io/json.h"
#include "model/config.h"

/* What config.json describes, beyond the gdn model. */
typedef struct {
    char model_type[16]; /* llama, qwen2, qwen3 */
} gdn_hf_info;

/* Reads a parsed config.json into *c (a valid gdn_config: every layer 'A'). Anything the gdn
 * model does not compute exactly as transformers does is refused: 0, or -1 with a message in
 * err naming the field and the value (another model_type or architecture, rope scaling or a
 * non-default rope_type, partial rotary, sliding-window layers, mixture-of-experts fields, an
 * activation other than silu, biases other than Qwen2's q/k/v ones, quantized weights, a
 * head_dim the attention layers cannot run). */
int gdn_hf_config(const io_json *root, gdn_config *c, gdn_hf_info *info, char *err, int err_len);

/* The Hugging Face name of gdn tensor name (model/params.h), into out: "model.embeddings.weight"
 * is "model.embed_tokens.weight", "model.layers.L.attn_norm.weight" is
 * "model.layers.L.input_layernorm.weight", "attn." is "self_attn.", "mlp_norm" is
 * "post_attention_layernorm"; the rest is the same. */
void gdn_hf_tensor_name(const char *name, char *out, size_t out_len);

#endif
