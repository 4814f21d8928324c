/* The subcommands of the gdn executable; train/main.c dispatches argv[1] to one of these.
 * Each returns the process exit status. argv[0] is the subcommand name. */
#ifndef GDN_COMMANDS_H
#define GDN_COMMANDS_H

int gdn_cmd_train(int argc, char **argv);   /* train/cmd_train.c */
int gdn_cmd_sample(int argc, char **argv);  /* train/cmd_sample.c */
int gdn_cmd_data(int argc, char **argv);    /* train/cmd_data.c: text -> token shards */
int gdn_cmd_tokenize(int argc, char **argv); /* train/cmd_tokenize.c: text <-> BPE ids */
int gdn_cmd_op(int argc, char **argv);      /* train/cmd_op.c: gdn op gated-delta */
int gdn_cmd_op_attention(int argc, char **argv); /* train/cmd_op_attention.c: gdn op attention */
int gdn_cmd_inspect(int argc, char **argv); /* train/cmd_inspect.c: checkpoint summary */
int gdn_cmd_bench(int argc, char **argv);   /* train/cmd_bench.c */
int gdn_cmd_import(int argc, char **argv);  /* train/cmd_import.c: Hugging Face -> checkpoint */
int gdn_cmd_op_logits(int argc, char **argv); /* train/cmd_op_logits.c: gdn op logits */
int gdn_cmd_eval(int argc, char **argv);    /* train/cmd_eval.c: loss, perplexity, bits per byte */
int gdn_cmd_export(int argc, char **argv);  /* train/cmd_export.c: Hugging Face model directory */
int gdn_cmd_linearize(int argc, char **argv); /* train/cmd_linearize.c: attention linearised, measured */
int gdn_cmd_distill(int argc, char **argv); /* train/cmd_distill.c: student from a softmax teacher */
int gdn_cmd_sweep(int argc, char **argv);   /* train/cmd_sweep.c: scaling sweeps (plan, run) */

#endif
