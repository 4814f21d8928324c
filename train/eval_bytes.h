/* gdn eval: the bytes of text per token of token shards, from the PREFIX_data.json that gdn data
 * writes beside its shards PREFIX_train_NNNNNN.bin and PREFIX_val_NNNNNN.bin (train/cmd_data.c). */
#ifndef GDN_TRAIN_EVAL_BYTES_H
#define GDN_TRAIN_EVAL_BYTES_H

#include <stdint.h>

#include "io/tokens.h"

typedef struct {
    double bytes_per_token; /* bytes / tokens of the parts the shards belong to */
    char path[1024];        /* the PREFIX_data.json read */
    char part[16];          /* "train", "val" or "train+val" */
    int whole;              /* 1: the shards are every shard of those parts, each once */
    int64_t tokens, bytes;  /* of those parts, as the record gives them */
} gdn_eval_bytes;

/* Finds the record of the shards of tok: every shard must be named PREFIX_train_N.bin or
 * PREFIX_val_N.bin with one PREFIX, and PREFIX_data.json must exist. Returns
 *   1: *out filled;
 *   0: no record applies (text, other shard names, several prefixes, no such file): why says
 *      which, for the "unknown" line;
 *  -1: a record exists but cannot be used: why is the warning (the file, the field, what is
 *      wrong): it does not parse, a field is missing or of the wrong type, its vocab_size
 *      exceeds the model's, its dtype is not the shards', a shard's number is beyond the part's
 *      shard count, or the shards' token count disagrees with the record's. */
int gdn_eval_bytes_find(const io_tokens *tok, int model_vocab, gdn_eval_bytes *out, char *why,
                        int why_len);

#endif
