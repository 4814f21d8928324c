/* gdn distill: softmax-attention teachers into Gated DeltaNet students. `gdn distill init` writes
 * the student's starting checkpoint (train/distill_init.h, docs/distillation.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/h5util.h"
#include "io/json.h"
#include "io/parse_num.h"
#include "io/tokens.h"
#include "comm/comm.h"
#include "model/check.h"
#include "train/commands.h"
#include "train/distill_init.h"
#include "train/distill_train.h"
#include "train/trainer.h"
#include "train/model_load.h"
#include "train/op_io.h"
#include "train/run_config.h"

static void distill_usage(FILE *f) {
    fprintf(f,
            "usage: gdn distill init --teacher TEACHER.h5 --out STUDENT.h5\n"
            "                        [--mixers PATTERN | --keep-softmax L1,L2,...]\n"
            "                        [--gate zero|default|value] [--conv identity|default]\n"
            "                        [--decay default|teacher --data SPEC]\n"
            "                        [--windows N] [--seq_len T] [--seed N]\n\n"
            "Writes a student checkpoint (step 0, weights only) from a teacher with softmax-attention\n"
            "layers (mixer A): each softmax layer becomes a gated delta rule layer (G) unless kept.\n"
            "Embeddings, norms, MLPs, the LM head and kept layers are copied bit for bit; a converted\n"
            "layer takes the teacher's q_proj and o_proj, and k_proj and v_proj with each key/value\n"
            "head repeated for its query heads (head_dim = the attention head dim, expand_v = 1).\n"
            "  --mixers PATTERN      the student's mixers (letters, repeated to n_layers); only the\n"
            "                        teacher's A layers may differ (to G, D, M or L, or stay A)\n"
            "  --keep-softmax LIST   layers (0-based) that stay softmax attention\n"
            "  --gate zero           g_proj = 0: every new mixer outputs exactly 0 (default)\n"
            "  --gate default        g_proj keeps its fresh random initialisation\n"
            "  --gate value          g_proj = 0.01 v_proj: each new mixer starts slightly open\n"
            "  --conv identity       short convolutions pass q, k, v through: last tap 1 (default)\n"
            "  --conv default        short convolutions keep their fresh random initialisation\n"
            "  --decay default       A_log, dt_bias, a_proj keep their fresh initialisation (default)\n"
            "  --decay teacher       per head, the decay whose mean distance equals the teacher's\n"
            "                        mean attention distance d on --data: A_log = 0, a_proj = 0,\n"
            "                        dt_bias = -ln d, so g = -ln(1 + 1/d) per token\n"
            "  --data SPEC           text (.txt, .gz: byte-level) or token shards, as for gdn train\n"
            "  --windows N           windows of --data measured (default 4; the first N, from 0)\n"
            "  --seq_len T           tokens per window (default 128)\n"
            "  --seed N              seed of the fresh initialisation of the other tensors (default 1)\n"
            "docs/distillation.md (Student initialisation) has the mapping and the formulas.\n\n"
            "usage: gdn distill train --teacher TEACHER.h5 --student STUDENT.h5 --out DIR --data SPEC\n"
            "                         [--stage1_steps N] [--stage2_steps N] [--stage1_lr X] [--stage2_lr X]\n"
            "                         [--tau T] [--ce_weight W] [--train mixers|all] [gdn train settings]\n\n"
            "Trains the student (from gdn distill init) against the teacher, in DIR/stage1 and DIR/stage2\n"
            "(each a gdn train run directory: config.json, metrics.jsonl, checkpoints):\n"
            "  stage 1   per converted layer, the student's mixer on the teacher's input to that layer,\n"
            "            fitted to the teacher's mixer output: loss = sum over layers of the mean squared\n"
            "            error (mean over tokens and d_model); only those mixers' tensors train\n"
            "  stage 2   loss = tau^2 KL(teacher || student) at temperature tau + ce_weight x next-token\n"
            "            cross-entropy, per token\n"
            "  --stage1_steps N      optimizer steps of stage 1 (default 200; 0 skips it)\n"
            "  --stage2_steps N      optimizer steps of stage 2 (default 200; 0 skips it)\n"
            "  --stage1_lr X, --stage2_lr X   peak learning rates (default: --lr)\n"
            "  --tau T               temperature of stage 2 (default 1)\n"
            "  --ce_weight W         weight of the cross-entropy in stage 2 (default 0)\n"
            "  --train mixers|all    stage 2 trains the converted mixers (default) or every tensor\n"
            "Every other gdn train setting applies to both stages (--data, --batch_size, --seq_len, --lr,\n"
            "--ckpt_every, --eval_every, --preset, --config, ...). Run again with the same command to\n"
            "continue: a finished stage is skipped and the current one resumes from its newest checkpoint\n"
            "(exit status 75 after SIGTERM/SIGUSR1: checkpoint written, run again). Over MPI ranks\n"
            "(mpiexec -n N): data-parallel, and with --sp N sequence-parallel on the CPU backend (the\n"
            "teacher and both stages run each rank's segment; --backend cuda needs sp = 1).\n"
            "docs/distillation.md (Training).\n");
}

typedef struct {
    const char *teacher, *out, *mixers, *keep, *data;
    distill_gate gate;
    int conv_identity, decay_teacher, windows, seq_len;
    uint64_t seed;
} init_opts;

/* --gate's words, in distill_gate's order. */
static const char *const gate_names[] = {
    [DISTILL_GATE_ZERO] = "zero", [DISTILL_GATE_DEFAULT] = "default", [DISTILL_GATE_VALUE] = "value"};

static int gate_named(const char *v) {
    for (int i = 0; i < (int)(sizeof gate_names / sizeof *gate_names); i++)
        if (!strcmp(v, gate_names[i])) return i;
    return -1;
}

/* 0, 1 (help printed) or 2 (usage error, message printed). */
static int parse_init(int argc, char **argv, init_opts *o) {
    *o = (init_opts){.gate = DISTILL_GATE_ZERO, .conv_identity = 1, .windows = 4, .seq_len = 128, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            distill_usage(stdout);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gdn distill init: option '%s' needs a value (see gdn distill --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char err[256];
        if (!strcmp(a, "--teacher")) o->teacher = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--mixers")) o->mixers = v;
        else if (!strcmp(a, "--keep-softmax")) o->keep = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--gate") && gate_named(v) >= 0)
            o->gate = (distill_gate)gate_named(v);
        else if (!strcmp(a, "--decay") && (!strcmp(v, "teacher") || !strcmp(v, "default")))
            o->decay_teacher = !strcmp(v, "teacher");
        else if (!strcmp(a, "--conv") && (!strcmp(v, "identity") || !strcmp(v, "default")))
            o->conv_identity = !strcmp(v, "identity");
        else if (!strcmp(a, "--gate") || !strcmp(a, "--decay") || !strcmp(a, "--conv")) {
            fprintf(stderr, "gdn distill init: %s must be %s (got '%s')\n", a,
                    !strcmp(a, "--gate") ? "zero, default or value" : !strcmp(a, "--conv") ? "identity or default"
                                                                                     : "default or teacher", v);
            return 2;
        } else if (!strcmp(a, "--windows") || !strcmp(a, "--seq_len")) {
            int *dst = !strcmp(a, "--windows") ? &o->windows : &o->seq_len;
            if (io_parse_int(a, v, 1, !strcmp(a, "--windows") ? 4096 : 65536, dst, err, sizeof err)) {
                fprintf(stderr, "gdn distill init: %s\n", err);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (io_parse_u64(a, v, UINT64_MAX, &o->seed, err, sizeof err)) {
                fprintf(stderr, "gdn distill init: %s\n", err);
                return 2;
            }
        } else {
            fprintf(stderr, "gdn distill init: unknown option '%s' (see gdn distill --help)\n", a);
            return 2;
        }
    }
    if (!o->teacher || !o->out) {
        fprintf(stderr, "gdn distill init: --teacher and --out are required (see gdn distill --help)\n");
        return 2;
    }
    if (o->mixers && o->keep) {
        fprintf(stderr, "gdn distill init: give --mixers or --keep-softmax, not both (a pattern with A "
                "in the kept layers says the same)\n");
        return 2;
    }
    if (o->decay_teacher != !!o->data) {
        fprintf(stderr, "gdn distill init: %s\n", o->data ? "--data is read only with --decay teacher"
                : "--decay teacher measures the teacher's attention on --data SPEC: give it");
        return 2;
    }
    if (op_same_file(o->teacher, o->out)) {
        fprintf(stderr, "gdn distill init: --out %s is the teacher; writing it would destroy it\n", o->out);
        return 2;
    }
    return 0;
}

/* The first n windows of T tokens of spec (fewer when it holds fewer): tokens [n*T] malloced. */
static int *read_windows(const char *spec, int vocab, int T, int *n, char *err, int err_len) {
    io_tokens tok;
    io_dataset ds;
    char sub[1024];
    if (io_tokens_open(&tok, spec, vocab, sub, sizeof sub)) {
        snprintf(err, (size_t)err_len, "--data: %s", sub);
        return NULL;
    }
    io_dataset_opts dopts = {.seq_len = T, .seed = 1};
    if (io_dataset_open(&ds, &tok, &tok, &dopts, sub, sizeof sub)) {
        snprintf(err, (size_t)err_len, "--data %.500s: %s", spec, sub);
        io_tokens_close(&tok);
        return NULL;
    }
    if ((uint64_t)*n > ds.n_val_windows) *n = (int)ds.n_val_windows;
    int *tokens = NULL;
    if (*n < 1) {
        snprintf(err, (size_t)err_len, "--data %.500s holds no window of --seq_len + 1 = %d tokens", spec, T + 1);
    } else {
        tokens = GDN_MALLOC(sizeof *tokens * (size_t)*n * T);
        int *row = GDN_MALLOC(sizeof *row * (size_t)(T + 1));
        for (int w = 0; w < *n; w++) {
            io_dataset_val_window(&ds, (uint64_t)w, row);
            memcpy(tokens + (size_t)w * T, row, sizeof *row * (size_t)T);
        }
        free(row);
    }
    io_dataset_close(&ds);
    io_tokens_close(&tok);
    return tokens;
}

static int distill_init(int argc, char **argv) {
    init_opts o;
    int r = parse_init(argc, argv, &o);
    if (r) return r == 1 ? 0 : r;
    io_h5_quiet();
    char err[2048];
    gdn_param_table tt, st;
    float *tp, *sp = NULL;
    ckpt_info info;
    if (gdn_model_load(o.teacher, &tt, &tp, &info, err, sizeof err)) {
        fprintf(stderr, "gdn distill init: --teacher: %s\n", err);
        return 1;
    }
    const gdn_config *tc = &tt.cfg;
    char *letters = GDN_MALLOC((size_t)tc->n_layers + 1);
    double *dist = NULL;
    char *config_json = NULL;
    int *tokens = NULL, status = 1;
    gdn_config sc;
    if (distill_student_mixers(tc, o.mixers, o.keep, letters, err, sizeof err) ||
        distill_student_config(tc, letters, &sc, err, sizeof err)) {
        fprintf(stderr, "gdn distill init: %s: %s\n", o.teacher, err);
        goto done;
    }
    if (o.decay_teacher) {
        int n = o.windows;
        if (!(tokens = read_windows(o.data, tc->vocab_size, o.seq_len, &n, err, sizeof err))) {
            fprintf(stderr, "gdn distill init: %s\n", err);
            goto done;
        }
        dist = GDN_MALLOC(sizeof *dist * (size_t)tc->n_layers * tc->n_heads);
        distill_attention_distance(&tt, tp, tokens, n, o.seq_len, dist);
        printf("gdn distill init: mean attention distance of the teacher (%d windows of %d tokens of %s), "
               "per converted layer and head -> dt_bias = -ln d:\n", n, o.seq_len, o.data);
    }
    gdn_param_table_build(&st, &sc);
    sp = GDN_MALLOC(st.total * sizeof *sp);
    gdn_params_init(sp, &st, o.seed);
    distill_init_opts mo = {.gate = o.gate, .conv_identity = o.conv_identity, .dist = dist};
    distill_map_params(&tt, tp, &st, sp, &mo);
    int converted = 0;
    for (int l = 0; l < sc.n_layers; l++) {
        if (st.layer[l].mixer == tt.layer[l].mixer) continue;
        converted++;
        if (!dist || st.layer[l].A_log == GDN_NO_TENSOR) continue;
        printf("  layer %d:", l);
        for (int h = 0; h < sc.n_heads; h++) printf(" %.4g", dist[(size_t)l * sc.n_heads + h]);
        printf("\n");
    }
    config_json = gdn_run_config_json_with_model(info.config_json, &sc, NULL);
    ckpt_contents c = {.step = 0, .tokens_seen = 0, .config_json = config_json, .model = &sc,
                       .table = &st, .params = sp};
    if (ckpt_save_atomic(o.out, &c, err, sizeof err)) {
        fprintf(stderr, "gdn distill init: --out: %s\n", err);
        gdn_param_table_free(&st);
        goto done;
    }
    printf("gdn distill init: %s (mixers \"%s\") -> %s: mixers \"%s\", %d of %d layers converted, "
           "head_dim %d, expand_v 1, gate %s, conv %s, decay %s, %zu parameters\n",
           o.teacher, gdn_config_mixers(tc), o.out, sc.mixers, converted, sc.n_layers, sc.head_dim,
           gate_names[o.gate], o.conv_identity ? "identity" : "default", o.decay_teacher ? "teacher" : "default", st.total);
    if (converted && (tc->qkv_bias || tc->qk_norm))
        printf("gdn distill init: note: the converted layers drop the teacher's %s%s%s: the delta rule has "
               "none (it L2-normalises q and k instead)\n", tc->qkv_bias ? "q/k/v biases" : "",
               tc->qkv_bias && tc->qk_norm ? " and " : "", tc->qk_norm ? "q/k norms" : "");
    gdn_param_table_free(&st);
    status = 0;
done:
    free(config_json);
    free(tokens);
    free(dist);
    free(letters);
    free(sp);
    free(tp);
    ckpt_info_free(&info);
    gdn_param_table_free(&tt);
    return status;
}

/* Takes gdn distill train's own options out of argv (both --key value and --key=value); the
 * rest are gdn train settings. 0, or 2 with the message printed. */
static int take_train_opts(int *argc, char **argv, distill_train_opts *o, int *lr_given) {
    int n = 1;
    char err[256];
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        const size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        static const char *const mine[] = {"--teacher", "--student", "--stage1_steps", "--stage2_steps",
                                           "--stage1_lr", "--stage2_lr", "--tau", "--ce_weight", "--train"};
        int k = -1;
        for (int j = 0; j < (int)(sizeof mine / sizeof *mine); j++)
            if (strlen(mine[j]) == klen && !strncmp(a, mine[j], klen)) k = j;
        static const char *const refused[] = {"--steps", "--resume", "--init_from", "--model_from", "--overwrite",
                                              "--eval_only"};
        for (int j = 0; j < (int)(sizeof refused / sizeof *refused); j++)
            if (strlen(refused[j]) == klen && !strncmp(a, refused[j], klen)) {
                fprintf(stderr, "gdn distill train: %s is not an option here: %s\n", refused[j],
                        j == 0 ? "give --stage1_steps and --stage2_steps"
                        : j <= 2 ? "a run resumes on its own (run the same command again); the start is --student"
                        : j == 3 ? "the student's model comes from --student"
                                 : "start afresh in a new --out, or delete the old one");
                return 2;
            }
        if (k < 0) {
            argv[n++] = argv[i];
            continue;
        }
        const char *v = eq ? eq + 1 : i + 1 < *argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "gdn distill train: option '%s' needs a value (see gdn distill --help)\n", mine[k]);
            return 2;
        }
        int bad = 0;
        if (k == 0) o->teacher = v;
        else if (k == 1) o->student = v;
        else if (k == 2 || k == 3) bad = io_parse_i64(mine[k], v, 0, INT64_MAX / 2, &o->steps[k - 2], err, sizeof err);
        else if (k == 4 || k == 5) {
            bad = io_parse_f64(mine[k], v, 1e-12, 1e3, &o->lr[k - 4], err, sizeof err);
            lr_given[k - 4] = 1;
        } else if (k == 6) bad = io_parse_f64(mine[k], v, 1e-3, 1e3, &o->tau, err, sizeof err);
        else if (k == 7) bad = io_parse_f64(mine[k], v, 0, 1e6, &o->ce_weight, err, sizeof err);
        else if (!strcmp(v, "mixers") || !strcmp(v, "all")) o->train_all = !strcmp(v, "all");
        else {
            snprintf(err, sizeof err, "--train must be mixers or all (got '%s')", v);
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "gdn distill train: %s\n", err);
            return 2;
        }
    }
    *argc = n;
    argv[n] = NULL;
    if (!o->teacher || !o->student) {
        fprintf(stderr, "gdn distill train: --teacher and --student are required (see gdn distill --help)\n");
        return 2;
    }
    if (o->steps[0] + o->steps[1] == 0) {
        fprintf(stderr, "gdn distill train: --stage1_steps and --stage2_steps are both 0: nothing to train\n");
        return 2;
    }
    return 0;
}

static int distill_train(int argc, char **argv) {
    static gdn_run_config rc; /* large (paths): keep it off the stack */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            distill_usage(stdout);
            return 0;
        }
    distill_train_opts o = {.steps = {200, 200}, .tau = 1.0};
    int lr_given[2] = {0, 0};
    /* argv with room for --model_from STUDENT and the terminator */
    char **av = GDN_MALLOC(sizeof(char *) * (size_t)(argc + 3));
    memcpy(av, argv, sizeof(char *) * (size_t)argc);
    int ac = argc, r = take_train_opts(&ac, av, &o, lr_given);
    if (r) {
        free(av);
        return r;
    }
    av[ac++] = "--model_from";
    av[ac++] = (char *)o.student;
    av[ac] = NULL;
    char err[1024];
    r = gdn_run_config_parse(&rc, ac, av, err, sizeof err);
    if (r < 0) fprintf(stderr, "gdn distill train: %s\n", err);
    int status = r < 0 ? GDN_EXIT_USAGE : 0;
    if (!status && rc.documents) {
        fprintf(stderr, "gdn distill train: --documents: distillation reads plain windows for now (the teacher "
                "would not see the document starts the student sees); leave documents off\n");
        status = GDN_EXIT_USAGE;
    }
    if (!status && rc.sp > 1 && !strcmp(rc.backend, "cuda")) { /* --backend auto runs several ranks on the CPU */
        fprintf(stderr, "gdn distill train: sp = %d with --backend cuda: sequence parallelism for distillation runs "
                "on the CPU backend only (the teacher's and the student's exchanges over NCCL have not run on "
                "several GPUs); use --backend cpu, or sp = 1 on the GPU\n", rc.sp);
        status = GDN_EXIT_USAGE;
    }
    if (status) {
        free(av);
        return status;
    }
    for (int s = 0; s < 2; s++)
        if (!lr_given[s]) o.lr[s] = rc.lr;
    io_h5_quiet();
    gdn_comm *comm = gdn_comm_init(&ac, &av, rc.sp, err, sizeof err);
    if (!comm) {
        if (err[0]) fprintf(stderr, "gdn distill train: %s\n", err);
        free(av);
        return GDN_EXIT_USAGE;
    }
    status = distill_train_run(&rc, &o, comm, ac, av);
    gdn_comm_finalize(comm);
    free(av);
    return status;
}

int gdn_cmd_distill(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        distill_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "init")) return distill_init(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return distill_train(argc - 1, argv + 1);
    fprintf(stderr, "gdn distill: unknown subcommand '%s' (init or train; see gdn distill --help)\n", argv[1]);
    return 2;
}
