/* gdn data's documents: a file's text cut at separator lines, each document written as the
 * end-of-document delimiter followed by its ids (io/docs.h describes the format). */
#ifndef GDN_TRAIN_DATA_DOCS_H
#define GDN_TRAIN_DATA_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

/* Cuts text[0, len) at every line equal to sep (the line and its newline dropped; a "\r\n"
 * ending is allowed; sep NULL: the text is one document) and appends each non-empty document to
 * out as eod then its ids: tok's encoding on `threads` threads, or its bytes (tok NULL).
 * *literal counts ids equal to eod inside documents (text that encodes to the delimiter, e.g. a
 * literal "<|endoftext|>": it starts a document where it stands). Returns the documents
 * appended, or -1 with the message in err. */
long long gdn_data_append_docs(const io_tokenizer *tok, int threads, const unsigned char *text,
                               size_t len, const char *sep, uint32_t eod, io_ids *out,
                               size_t *literal, char *err, int err_len);

/* The default delimiter of a tokenizer: the id of <|endoftext|>, <|end_of_text|> or </s>
 * (the first it has), or -1. */
int64_t gdn_data_default_eod(const io_tokenizer *tok);

#endif
