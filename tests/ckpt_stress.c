/* Helper for the checkpoint end-to-end tests.
 *   ckpt_stress write DIR [--steps N] [--keep K]   resume from DIR's newest usable checkpoint
 *       and save steps forever (or N more), each with contents determined by the step alone,
 *       pruning to K files; ckpt_kill.sh SIGKILLs it at random moments.
 *   ckpt_stress verify DIR    every final-named checkpoint must load, pass its checksums, hold
 *       exactly the contents of its step, and ckpt_find_resume must pick the newest.
 *   ckpt_stress known FILE    writes a small checkpoint whose values ckpt_h5py.py recomputes.
 *   ckpt_stress inspect ...   runs gdn inspect (the library command) with these arguments.
 *   ckpt_stress dataranges FILE   prints "OFFSET SIZE" of every dataset's raw data (so that
 *       ckpt_mutate.py can aim at HDF5 metadata); only for trusted files.
 * The "write" model has 1.71M parameters: about 20 MB per file with the AdamW moments. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "io/checkpoint.h"
#include "tests/ckpt_fake.h"
#include "train/commands.h"

enum { SALT_P = 1, SALT_M = 2, SALT_V = 3 };

typedef struct {
    gdn_config cfg;
    gdn_param_table table;
    float *p, *m, *v;
} model;

static void model_init(model *md, const gdn_config *cfg) {
    md->cfg = *cfg;
    ckpt_fake_table(&md->table, cfg);
    md->p = malloc(md->table.total * sizeof(float));
    md->m = malloc(md->table.total * sizeof(float));
    md->v = malloc(md->table.total * sizeof(float));
    if (!md->p || !md->m || !md->v) {
        fprintf(stderr, "ckpt_stress: out of memory\n");
        exit(1);
    }
}

static void model_free(model *md) {
    ckpt_fake_free(&md->table);
    free(md->p);
    free(md->m);
    free(md->v);
}

/* The model whose checkpoints "write" makes: 1,711,504 parameters. */
static gdn_config stress_config(void) { return ckpt_fake_config(4096, 128, 4); }

static void fill_step(model *md, int64_t step) {
    ckpt_fake_fill(md->p, md->table.total, step, SALT_P);
    ckpt_fake_fill(md->m, md->table.total, step, SALT_M);
    ckpt_fake_fill(md->v, md->table.total, step, SALT_V);
}

static int save(const char *path, model *md, int64_t step, const char *config) {
    uint64_t rng[2] = {(uint64_t)step * 0x9E3779B97F4A7C15ull, ~(uint64_t)step};
    ckpt_kv kv[2] = {{"data_position", step * 1000}, {"schedule_step", step}};
    ckpt_contents c = {.step = step,
                       .tokens_seen = step * 4096,
                       .config_json = config,
                       .model = &md->cfg,
                       .table = &md->table,
                       .params = md->p,
                       .m = md->m,
                       .v = md->v,
                       .rng = rng,
                       .n_rng = 2,
                       .state = kv,
                       .n_state = 2};
    char err[2048];
    if (ckpt_save_atomic(path, &c, err, sizeof err) != CKPT_OK) {
        fprintf(stderr, "ckpt_stress: %s\n", err);
        return -1;
    }
    return 0;
}

static int cmd_write(const char *dir, int64_t n_steps, int keep) {
    model md;
    gdn_config cfg = stress_config();
    model_init(&md, &cfg);
    char path[4096], err[2048];
    int64_t step = 0;
    int found = ckpt_find_resume(dir, path, sizeof path, &step, err, sizeof err);
    if (found < 0) {
        fprintf(stderr, "ckpt_stress: %s\n", err);
        return 1;
    }
    if (found) { /* a real resume: load (and so check) what we continue from */
        ckpt_info info;
        if (ckpt_load(path, &cfg, &md.table, md.p, md.m, md.v, &info, err, sizeof err) != CKPT_OK) {
            fprintf(stderr, "ckpt_stress: resume failed: %s\n", err);
            return 1;
        }
        ckpt_info_free(&info);
    } else {
        step = 0;
    }
    for (int64_t k = 0; n_steps < 0 || k < n_steps; k++) {
        step++;
        fill_step(&md, step);
        if (ckpt_path_for_step(dir, step, path, sizeof path) < 0 ||
            save(path, &md, step, "{\"stress\": true}") < 0)
            return 1;
        /* progress for ckpt_kill.sh, which kills only after a save of this writer */
        printf("saved %lld\n", (long long)step);
        fflush(stdout);
        if (ckpt_prune(dir, keep, err, sizeof err) < 0) {
            fprintf(stderr, "ckpt_stress: %s\n", err);
            return 1;
        }
    }
    model_free(&md);
    return 0;
}

/* Loads one final-named file and compares everything with what step's save wrote. */
static int verify_file(const char *path, int64_t name_step, model *md, model *want) {
    char err[2048];
    ckpt_info info;
    if (ckpt_load(path, &md->cfg, &md->table, md->p, md->m, md->v, &info, err, sizeof err) !=
        CKPT_OK) {
        fprintf(stderr, "ckpt_stress verify: %s\n", err);
        return -1;
    }
    int64_t dp = -1, ss = -1;
    fill_step(want, info.step);
    size_t bytes = md->table.total * sizeof(float);
    int ok = info.step == name_step && info.tokens_seen == info.step * 4096 &&
             ckpt_info_get(&info, "data_position", &dp) == 0 && dp == info.step * 1000 &&
             ckpt_info_get(&info, "schedule_step", &ss) == 0 && ss == info.step &&
             info.n_rng == 2 && info.rng[1] == ~(uint64_t)info.step &&
             memcmp(md->p, want->p, bytes) == 0 && memcmp(md->m, want->m, bytes) == 0 &&
             memcmp(md->v, want->v, bytes) == 0;
    if (!ok)
        fprintf(stderr, "ckpt_stress verify: %s: contents are not those of step %lld\n", path,
                (long long)name_step);
    ckpt_info_free(&info);
    return ok ? 0 : -1;
}

static int cmd_verify(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    model md, want;
    gdn_config cfg = stress_config();
    model_init(&md, &cfg);
    model_init(&want, &cfg);
    int n_final = 0, n_tmp = 0, bad = 0;
    int64_t newest = -1;
    struct dirent *e;
    char path[4096], err[2048];
    while ((e = readdir(d)) != NULL) {
        long long step;
        char tail[8];
        if (strstr(e->d_name, ".tmp.")) n_tmp++;
        if (sscanf(e->d_name, "ckpt_%lld.h%7s", &step, tail) != 2 || strcmp(tail, "5") != 0)
            continue;
        n_final++;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (verify_file(path, step, &md, &want) < 0) bad++;
        if (step > newest) newest = step;
    }
    closedir(d);
    int64_t step = -1;
    int found = ckpt_find_resume(dir, path, sizeof path, &step, err, sizeof err);
    if (found < 0 || (n_final > 0 && (found != 1 || step != newest)) ||
        (n_final == 0 && found != 0)) {
        fprintf(
            stderr,
            "ckpt_stress verify: ckpt_find_resume gave %d (step %lld), expected step %lld: %s\n",
            found, (long long)step, (long long)newest, found < 0 ? err : "");
        bad++;
    }
    printf("verified %d checkpoints (newest step %lld), %d temp files, %d problems\n", n_final,
           (long long)newest, n_tmp, bad);
    model_free(&md);
    model_free(&want);
    return bad ? 1 : 0;
}

/* A small file with exactly representable values: tensor t (table order), element j holds
 * ((7 j + 3 t) mod 101 - 50) / 64, m holds it / 2, v its square. */
static int cmd_known(const char *path) {
    model md;
    gdn_config cfg = ckpt_fake_config(64, 16, 2);
    model_init(&md, &cfg);
    for (int t = 0; t < md.table.n; t++) {
        const gdn_param *p = &md.table.p[t];
        for (size_t j = 0; j < p->numel; j++) {
            float x = (float)((int)((7 * j + 3 * (size_t)t) % 101) - 50) / 64.0f;
            md.p[p->offset + j] = x;
            md.m[p->offset + j] = x / 2;
            md.v[p->offset + j] = x * x;
        }
    }
    int rc = save(path, &md, 12, "{\"model\": {\"d_model\": 16}, \"name\": \"known \\u00e9\"}");
    model_free(&md);
    return rc < 0 ? 1 : 0;
}

static herr_t print_range(hid_t loc, const char *name, const H5O_info_t *oi, void *data) {
    (void)data;
    if (oi->type != H5O_TYPE_DATASET) return 0;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return -1;
    haddr_t off = H5Dget_offset(d);
    hsize_t size = H5Dget_storage_size(d);
    H5Dclose(d);
    if (off != HADDR_UNDEF) printf("%llu %llu\n", (unsigned long long)off, (unsigned long long)size);
    return 0;
}

static int cmd_dataranges(const char *path) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return 1;
    herr_t rc = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, print_range, NULL);
    H5Fclose(file);
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "write") == 0) {
        int64_t steps = -1;
        int keep = 3;
        for (int i = 3; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--steps") == 0)
                steps = atoll(argv[i + 1]);
            else if (strcmp(argv[i], "--keep") == 0)
                keep = atoi(argv[i + 1]);
        }
        return cmd_write(argv[2], steps, keep);
    }
    if (argc == 3 && strcmp(argv[1], "verify") == 0) return cmd_verify(argv[2]);
    if (argc == 3 && strcmp(argv[1], "known") == 0) return cmd_known(argv[2]);
    if (argc == 3 && strcmp(argv[1], "dataranges") == 0) return cmd_dataranges(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0) return gdn_cmd_inspect(argc - 1, argv + 1);
    fprintf(stderr, "usage: ckpt_stress write DIR [--steps N] [--keep K] | verify DIR | known FILE"
                    " | inspect [--json] FILE\n");
    return 2;
}
