/* gdn export MODEL.h5 --out HF_DIR: a checkpoint as a Hugging Face model directory
 * (config.json + model.safetensors) that transformers loads without custom code:
 *   softmax models (mixer A in every layer)   Llama, Qwen2 (qkv_bias) or Qwen3 (qk_norm)
 *   GDN models (mixer G in every layer)        Qwen3-Next with every layer a linear-attention layer
 *   hybrids of G and A layers with qk_norm     Qwen3-Next, the A layers full_attention layers
 * The mapping is train/export_hf.c; its tables and what cannot be exported are in
 * docs/interop.md ("Export"). This file reads the checkpoint and writes the directory, which
 * is built under a temporary name beside HF_DIR and renamed into place, so HF_DIR is either
 * complete or untouched. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors_write.h"
#include "model/config.h"
#include "model/params.h"
#include "train/commands.h"
#include "train/export_hf.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn export MODEL.h5 --out HF_DIR [--dtype f32|bf16] [--force]\n"
            "  Writes a Hugging Face model directory (config.json, model.safetensors) that\n"
            "  transformers loads with AutoModelForCausalLM and no custom code:\n"
            "    softmax models (mixers all A): Llama; Qwen3 with qk_norm; Qwen2 with qkv_bias (Llama\n"
            "    with attention_bias when the head dimension is not d_model / n_heads)\n"
            "    GDN models (mixers all G): Qwen3-Next, every layer a linear-attention layer with a\n"
            "    dense MLP; hybrids of G and A layers with qk_norm: Qwen3-Next, the A layers\n"
            "    full-attention layers whose output gate is constant\n"
            "  Other models (hybrids without qk_norm, the D/M/L mixers, allow_neg_eigval) are\n"
            "  refused with the reason; docs/interop.md has the tensor mapping.\n"
            "  --dtype   tensor type in model.safetensors: f32 (default) or bf16\n"
            "  --force   replace HF_DIR when it exists and is not empty\n"
            "  HF_DIR is built under a temporary name and renamed into place: it is complete or\n"
            "  untouched. Exit status: 0 written, 1 refused or failed, 2 usage.\n");
}

/* ---- the directory ------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Removes path and everything under it (symbolic links are removed, not followed). */
static int rm_tree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* 1: path is a directory with entries; 0: an empty directory; -1: not a directory (err set). */
static int dir_state(const char *path, char *err, size_t errlen) {
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "%s: %s", path,
                 errno == ENOTDIR ? "exists and is not a directory: give a directory path for --out"
                                  : strerror(errno));
        return -1;
    }
    struct dirent *e;
    int full = 0;
    while (!full && (e = readdir(d)))
        full = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return full;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t k = write(fd, text + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    int bad = done < n || write(fd, "\n", 1) != 1 || fsync(fd);
    int saved = errno;
    if (close(fd)) bad = 1;
    if (bad) {
        snprintf(err, errlen, "%s: writing failed: %s", path, strerror(saved));
        unlink(path);
        return -1;
    }
    return 0;
}

/* The parent directory of path, for the final fsync. */
static void parent_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

/* Moves the finished tmp directory to out. rename(2) replaces an empty directory itself; a full
 * one (with --force) is moved aside first and removed once the new one is in place. */
static int install_dir(const char *tmp, const char *out, int exists, char *err, size_t errlen) {
    if (exists != 1) {
        if (rename(tmp, out)) {
            snprintf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
            return -1;
        }
        return 0;
    }
    char old[4200];
    snprintf(old, sizeof old, "%s.old.%ld", out, (long)getpid());
    if (rename(out, old)) {
        snprintf(err, errlen, "%s: cannot move the old directory aside: %s", out, strerror(errno));
        return -1;
    }
    if (rename(tmp, out)) {
        int e = errno;
        if (rename(old, out)) fprintf(stderr, "gdn export: the old %s is now %s\n", out, old);
        snprintf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(e));
        return -1;
    }
    if (rm_tree(old)) fprintf(stderr, "gdn export: warning: could not remove the replaced %s\n", old);
    return 0;
}

int gdn_cmd_export(int argc, char **argv) {
    const char *model = NULL, *out_arg = NULL;
    int force = 0;
    stw_dtype dtype = STW_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (!strcmp(a, "--out") || !strcmp(a, "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "gdn export: %s needs a value\n", a);
                usage(stderr);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--out")) {
                out_arg = v;
            } else if (!strcmp(v, "f32") || !strcmp(v, "fp32") || !strcmp(v, "float32")) {
                dtype = STW_F32;
            } else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) {
                dtype = STW_BF16;
            } else {
                fprintf(stderr, "gdn export: --dtype \"%s\" is not a tensor type: use f32 or bf16\n", v);
                return 2;
            }
        } else if (a[0] == '-' || model) {
            fprintf(stderr, "gdn export: unexpected argument \"%s\"\n", a);
            usage(stderr);
            return 2;
        } else {
            model = a;
        }
    }
    if (!model || !out_arg || !*out_arg) {
        fprintf(stderr, "gdn export: %s\n", !model ? "give the checkpoint MODEL.h5" : "give --out HF_DIR");
        usage(stderr);
        return 2;
    }
    char out[4096];
    if (snprintf(out, sizeof out, "%s", out_arg) >= (int)sizeof out) {
        fprintf(stderr, "gdn export: --out path is too long\n");
        return 2;
    }
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;

    char err[10240];
    struct stat st;
    int exists = -2; /* -2: absent; 0 empty; 1 full */
    if (lstat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "gdn export: --out %s exists and is not a directory%s: give a directory path\n",
                    out, S_ISLNK(st.st_mode) ? " (a symbolic link; it is not followed)" : "");
            return 1;
        }
        exists = dir_state(out, err, sizeof err);
        if (exists < 0) {
            fprintf(stderr, "gdn export: --out %s\n", err);
            return 1;
        }
        if (exists == 1 && !force) {
            fprintf(stderr, "gdn export: --out %s exists and is not empty: choose another directory, "
                            "or pass --force to replace it\n", out);
            return 1;
        }
    }

    ckpt_info info;
    if (ckpt_read_info(model, &info, err, sizeof err)) {
        fprintf(stderr, "gdn export: %s\n", err);
        return 1;
    }
    gdn_config cfg = info.model;
    ckpt_info_free(&info);
    if (gdn_config_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "gdn export: %s: the model configuration is invalid: %s\n", model, err);
        return 1;
    }
    export_arch arch;
    if (export_choose_arch(&cfg, &arch, err, sizeof err)) {
        fprintf(stderr, "gdn export: %s cannot be exported: %s\n", model, err);
        return 1;
    }
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    float *params = malloc(t.total * sizeof *params);
    if (!params) {
        fprintf(stderr, "gdn export: out of memory for %zu parameters\n", t.total);
        gdn_param_table_free(&t);
        return 1;
    }
    int rc = 1;
    stw_writer *w = NULL;
    io_jw j;
    io_jw_init(&j, 1);
    char tmp[4200] = "", path[4300];
    if (ckpt_load(model, &cfg, &t, params, NULL, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "gdn export: %s\n", err);
        goto done;
    }
    w = stw_create(dtype);
    if (!w) {
        fprintf(stderr, "gdn export: out of memory\n");
        goto done;
    }
    if (export_tensors(w, &t, params, arch, err, sizeof err)) {
        fprintf(stderr, "gdn export: %s: %s\n", model, err);
        goto done;
    }
    export_config(&j, &cfg, arch, dtype);

    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (mkdir(tmp, 0755)) {
        fprintf(stderr, "gdn export: cannot create %s: %s%s\n", tmp, strerror(errno),
                errno == ENOENT ? " (does the parent directory of --out exist?)" : "");
        tmp[0] = 0; /* not ours: leave it */
        goto done;
    }
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (write_text(path, io_jw_text(&j), err, sizeof err)) goto fail_msg;
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (stw_write(w, path, err, sizeof err)) goto fail_msg;
    if (fsync_path(tmp)) {
        snprintf(err, sizeof err, "%s: cannot sync: %s", tmp, strerror(errno));
        goto fail_msg;
    }
    if (install_dir(tmp, out, exists, err, sizeof err)) goto fail_msg;
    tmp[0] = 0;
    char parent[4096];
    parent_of(out, parent, sizeof parent);
    fsync_path(parent); /* best effort: the data are synced, the name follows */
    printf("gdn export: %s -> %s (%s, %d tensors, %s)\n", model, out, export_model_type(arch), stw_count(w),
           dtype == STW_BF16 ? "bf16" : "f32");
    rc = 0;
    goto done;
fail_msg:
    fprintf(stderr, "gdn export: %s\n", err);
done:
    if (tmp[0] && rm_tree(tmp)) fprintf(stderr, "gdn export: warning: could not remove %s\n", tmp);
    io_jw_free(&j);
    stw_free(w);
    free(params);
    gdn_param_table_free(&t);
    return rc;
}
