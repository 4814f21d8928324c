/* gdn: train and run Gated DeltaNet language models. This file only dispatches subcommands. */
#include <stdio.h>
#include <string.h>

#include "train/commands.h"
#include "train/threads.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} gdn_command;

static const gdn_command commands[] = {
    {"train", gdn_cmd_train, "train a model (gdn train --help)"},
    {"sample", gdn_cmd_sample, "generate text from a trained model"},
    {"data", gdn_cmd_data, "turn text into token shards"},
    {"tokenize", gdn_cmd_tokenize, "encode text with a BPE tokenizer (or decode ids)"},
    {"op", gdn_cmd_op, "run one operator on arrays from an HDF5 file (gdn op gated-delta | attention | logits)"},
    {"inspect", gdn_cmd_inspect, "print and verify a checkpoint"},
    {"bench", gdn_cmd_bench, "time the delta rule and training steps"},
    {"import", gdn_cmd_import, "convert a Hugging Face Llama/Qwen2/Qwen3 checkpoint (gdn import --help)"},
    {"eval", gdn_cmd_eval, "loss, perplexity and bits per byte of a checkpoint on held-out data"},
    {"export", gdn_cmd_export, "write a checkpoint as a Hugging Face model directory"},
    {"linearize", gdn_cmd_linearize, "measure training-free linearisations of a teacher's attention"},
    {"distill", gdn_cmd_distill, "a GDN student from a softmax-attention teacher (gdn distill --help)"},
    {"sweep", gdn_cmd_sweep, "plan and run a scaling sweep (gdn sweep --help, docs/scaling.md)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: gdn <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'gdn <command> --help' describes each command.\n");
}

int main(int argc, char **argv) {
    gdn_threads_set_wait_policy(argv); /* passive OpenMP waits unless the user chose (may re-exec) */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gdn: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
