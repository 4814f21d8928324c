/* Checkpoints: bitwise round trip, atomic replacement, and a distinct, named error for each
 * kind of damage (truncation, flipped data bytes, wrong format/version, model mismatch,
 * missing or unexpected tensors); resume skips a damaged newest file; pruning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "io/h5util.h"
#include "tests/ckpt_fake.h"
#include "train/commands.h"

/* One test's world: a temp directory, a small model and its three buffers. */
typedef struct {
    char dir[256];
    gdn_config cfg;
    gdn_param_table table;
    float *params, *m, *v;
} fixture;

static const uint64_t RNG[5] = {0x0123456789ABCDEFull, 0, UINT64_MAX, 42, 0x8000000000000000ull};

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/gdn_ckpt_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(f->dir));
    f->cfg = ckpt_fake_config(64, 16, 2);
    ckpt_fake_table(&f->table, &f->cfg);
    size_t n = f->table.total;
    f->params = malloc(n * sizeof(float));
    f->m = malloc(n * sizeof(float));
    f->v = malloc(n * sizeof(float));
    ckpt_fake_fill(f->params, n, 7, 1);
    ckpt_fake_fill(f->m, n, 7, 2);
    ckpt_fake_fill(f->v, n, 7, 3);
    /* Values a lossy path would change: signed zero, infinities, a NaN payload, denormals. */
    uint32_t nan_bits = 0x7FC01234u;
    memcpy(&f->params[3], &nan_bits, sizeof nan_bits);
    f->params[4] = -0.0f;
    f->params[5] = INFINITY;
    f->params[6] = -INFINITY;
    f->params[7] = 1e-45f;
    *state = f;
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state) {
    fixture *f = *state;
    nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    ckpt_fake_free(&f->table);
    free(f->params);
    free(f->m);
    free(f->v);
    free(f);
    return 0;
}

static ckpt_contents contents(fixture *f, int64_t step, const char *config_json) {
    static ckpt_kv kv[3] = {{"data_position", 0}, {"schedule_step", 0}, {"epoch", -3}};
    kv[0].value = step * 1000 + 17;
    kv[1].value = step;
    ckpt_contents c = {
        .step = step,
        .tokens_seen = step * 4096 + (INT64_C(1) << 40),
        .config_json = config_json,
        .model = &f->cfg,
        .table = &f->table,
        .params = f->params,
        .m = f->m,
        .v = f->v,
        .rng = RNG,
        .n_rng = 5,
        .state = kv,
        .n_state = 3,
    };
    return c;
}

static void save_step(fixture *f, const char *path, int64_t step) {
    char err[2048];
    ckpt_contents c = contents(f, step, "{\"run\": 1}");
    int st = ckpt_save_atomic(path, &c, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
}

static void path_in(fixture *f, const char *name, char *out, size_t len) {
    snprintf(out, len, "%s/%s", f->dir, name);
}

/* Number of entries of dir whose name contains needle. */
static int count_named(const char *dir, const char *needle) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c -- '%s'", dir, needle);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (!p || fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

static void expect_error(int st, int want, const char *err, const char *needle) {
    if (st != want)
        fail_msg("status %d (%s), expected %d (%s); message: %s", st, ckpt_status_str(st), want,
                 ckpt_status_str(want), err);
    if (!strstr(err, needle)) fail_msg("message lacks \"%s\": %s", needle, err);
}

/* File offset of the raw data of dataset `name`, via HDF5 itself. */
static long long data_offset(const char *path, const char *name) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(file >= 0);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    assert_true(d >= 0);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(file);
    assert_true(off != HADDR_UNDEF);
    return (long long)off;
}

static void flip_byte(const char *path, long long offset) {
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, offset), 1);
    b ^= 0x5A;
    assert_int_equal(pwrite(fd, &b, 1, offset), 1);
    close(fd);
}

/* Loads the weights of path (model compared with cfg unless NULL) and checks they are the
 * fixture's, bit for bit; `what` names the case when the reader refuses the file. */
static void expect_weights(fixture *f, const char *path, const gdn_config *cfg, const char *what) {
    char err[2048];
    float *p = calloc(f->table.total, sizeof(float));
    int st = ckpt_load(path, cfg, &f->table, p, NULL, NULL, NULL, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s refused: %s", what, err);
    assert_memory_equal(p, f->params, f->table.total * sizeof(float));
    free(p);
}

/* gdn inspect on path with its report sent to /dev/null; its exit status. */
static int run_inspect_quiet(const char *path) {
    char *argv[] = {"inspect", (char *)path, NULL};
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    int rc = gdn_cmd_inspect(2, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(devnull);
    return rc;
}

/* Runs save(f, path) in a child process whose files cannot grow past limit bytes, as on a full
 * disk (every write past it fails with EFBIG instead of a signal). The child's exit status is
 * save's result; with use_exit it leaves through exit(), running the atexit handlers, else
 * through _exit(). Fails the test, naming `what`, unless the child exits with 0. */
static void expect_child_under_fsize_limit(fixture *f, const char *path, rlim_t limit,
                                           int (*save)(fixture *, const char *), int use_exit,
                                           const char *what) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {limit, limit};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        int rc = save(f, path);
        if (use_exit) exit(rc);
        _exit(rc);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("limit %llu: %s (status 0x%x)", (unsigned long long)limit, what, status);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_round_trip_bitwise(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    ckpt_path_for_step(f->dir, 7, path, sizeof path);
    /* A long config with quotes, newlines and non-ASCII text: stored as one UTF-8 string
     * beyond the 64 KiB limit of compact attributes. */
    size_t big = 100000;
    char *config = malloc(big + 64);
    int k = snprintf(config, big + 64,
                     "{\"note\": \"\\\"quoted\\\" \xc3\xa9t\xc3\xa9\\n\", \"pad\": \"");
    memset(config + k, 'x', big - (size_t)k);
    strcpy(config + big, "\"}");
    ckpt_contents c = contents(f, 7, config);
    int st = ckpt_save_atomic(path, &c, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    assert_int_equal(count_named(f->dir, ".tmp."), 0);

    size_t n = f->table.total;
    float *p2 = calloc(n, sizeof(float)), *m2 = calloc(n, sizeof(float)),
          *v2 = calloc(n, sizeof(float));
    ckpt_info info;
    st = ckpt_load(path, &f->cfg, &f->table, p2, m2, v2, &info, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    assert_memory_equal(p2, f->params, n * sizeof(float));
    assert_memory_equal(m2, f->m, n * sizeof(float));
    assert_memory_equal(v2, f->v, n * sizeof(float));
    assert_int_equal(info.format_version, CKPT_FORMAT_VERSION);
    assert_int_equal(info.step, 7);
    assert_int_equal(info.tokens_seen, c.tokens_seen);
    assert_string_equal(info.config_json, config);
    assert_int_equal(info.has_optim, 1);
    assert_int_equal(info.n_rng, 5);
    assert_memory_equal(info.rng, RNG, sizeof RNG);
    int64_t val;
    assert_int_equal(info.n_state, 3);
    assert_int_equal(ckpt_info_get(&info, "data_position", &val), 0);
    assert_int_equal(val, 7017);
    assert_int_equal(ckpt_info_get(&info, "schedule_step", &val), 0);
    assert_int_equal(val, 7);
    assert_int_equal(ckpt_info_get(&info, "epoch", &val), 0);
    assert_int_equal(val, -3);
    assert_int_equal(ckpt_info_get(&info, "absent", &val), -1);
#define SAME_FIELD(fl) assert_int_equal(info.model.fl, f->cfg.fl);
    CKPT_MODEL_INT_FIELDS(SAME_FIELD)
#undef SAME_FIELD
    assert_memory_equal(&info.model.norm_eps, &f->cfg.norm_eps, sizeof(double));
    ckpt_info_free(&info);

    /* The header alone, and the table-free verification. */
    st = ckpt_read_info(path, &info, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    assert_int_equal(info.step, 7);
    ckpt_info_free(&info);
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);

    /* No object stores a time (so a file depends only on its contents). Bytes are not compared:
     * HDF5 may write unused, uninitialised bytes inside its metadata blocks. */
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(file >= 0);
    const char *objects[] = {"/params", "/state", "/optim/m"};
    for (size_t i = 0; i < sizeof objects / sizeof objects[0]; i++) {
        H5O_info_t oi;
        assert_true(H5Oget_info_by_name2(file, objects[i], &oi, H5O_INFO_TIME, H5P_DEFAULT) >= 0);
        assert_true(oi.ctime == 0 && oi.mtime == 0 && oi.atime == 0 && oi.btime == 0);
    }
    H5O_info_t oi;
    char first[GDN_PARAM_NAME_MAX + 16];
    snprintf(first, sizeof first, "/params/%s", f->table.p[0].name);
    assert_true(H5Oget_info_by_name2(file, first, &oi, H5O_INFO_TIME, H5P_DEFAULT) >= 0);
    assert_true(oi.ctime == 0 && oi.mtime == 0);
    H5Fclose(file);
    free(config);
    free(p2);
    free(m2);
    free(v2);
}

static void test_weights_only(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "weights.h5", path, sizeof path);
    ckpt_contents c = contents(f, 3, "{}");
    c.m = c.v = NULL;
    c.rng = NULL;
    c.n_rng = 0;
    c.n_state = 0;
    c.model = NULL; /* the table's own config */
    int st = ckpt_save_atomic(path, &c, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    size_t n = f->table.total;
    float *p2 = calloc(n, sizeof(float)), *m2 = calloc(n, sizeof(float)),
          *v2 = calloc(n, sizeof(float));
    ckpt_info info;
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, &info, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    assert_memory_equal(p2, f->params, n * sizeof(float));
    assert_int_equal(info.has_optim, 0);
    assert_int_equal(info.n_rng, 0);
    assert_null(info.rng);
    assert_int_equal(info.n_state, 0);
    ckpt_info_free(&info);
    st = ckpt_load(path, &f->cfg, &f->table, p2, m2, v2, NULL, err, sizeof err);
    expect_error(st, CKPT_E_TENSOR, err, "weights-only");
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    /* m without v is refused before anything is written. */
    c.m = f->m;
    st = ckpt_save_atomic(path, &c, err, sizeof err);
    expect_error(st, CKPT_E_ARG, err, "together");
    free(p2);
    free(m2);
    free(v2);
}

static void test_replace_is_atomic(void **state) {
    fixture *f = *state;
    char path[512], err[2048], copy[600], cmd[1400];
    ckpt_path_for_step(f->dir, 1, path, sizeof path);
    save_step(f, path, 1);
    snprintf(copy, sizeof copy, "%s/copy_of_1", f->dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    assert_int_equal(system(cmd), 0);

    /* A reader holding the old file keeps seeing it whole: the new file is a new inode. */
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    int old_fd = open(path, O_RDONLY);
    assert_true(old_fd >= 0);
    ckpt_fake_fill(f->params, f->table.total, 2, 1);
    save_step(f, path, 2);
    assert_int_equal(stat(path, &after), 0);
    assert_true(before.st_ino != after.st_ino);
    char *old = malloc((size_t)before.st_size), *ref = malloc((size_t)before.st_size);
    assert_int_equal(pread(old_fd, old, (size_t)before.st_size, 0), before.st_size);
    close(old_fd);
    FILE *fr = fopen(copy, "rb");
    assert_int_equal(fread(ref, 1, (size_t)before.st_size, fr), (size_t)before.st_size);
    fclose(fr);
    assert_memory_equal(old, ref, (size_t)before.st_size);
    free(old);
    free(ref);

    ckpt_info info;
    float *p2 = calloc(f->table.total, sizeof(float));
    int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, &info, err, sizeof err);
    if (st != CKPT_OK) fail_msg("%s", err);
    assert_int_equal(info.step, 2);
    assert_memory_equal(p2, f->params, f->table.total * sizeof(float));
    ckpt_info_free(&info);

    /* A save that fails after all tensors are written (a duplicate state name makes the last
     * write fail) leaves the previous file byte-identical and no temp file behind. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    assert_int_equal(system(cmd), 0);
    ckpt_kv dup[2] = {{"data_position", 1}, {"data_position", 2}};
    ckpt_contents c = contents(f, 3, "{}");
    c.state = dup;
    c.n_state = 2;
    st = ckpt_save_atomic(path, &c, err, sizeof err);
    expect_error(st, CKPT_E_IO, err, "data_position");
    assert_non_null(strstr(err, "previous checkpoints are untouched"));
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(count_named(f->dir, ".tmp."), 0);

    /* A directory that does not exist: a clear I/O error, nothing created. */
    char nowhere[600];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/ckpt.h5", f->dir);
    st = ckpt_save_atomic(nowhere, &c, err, sizeof err);
    expect_error(st, CKPT_E_IO, err, "exists and is writable");
    free(p2);
}

/* A full disk at any point of the write: the save fails with an I/O error, the previous file
 * stays byte-identical and no temp file is left. RLIMIT_FSIZE (in a child process) makes
 * every write past the limit fail, as ENOSPC would. */
/* In the child: new weights saved over path must fail with an I/O error that says the previous
 * checkpoints are untouched; 0 when they do. */
static int save_new_weights_fails(fixture *f, const char *path) {
    char err[2048];
    ckpt_fake_fill(f->params, f->table.total, 2, 1);
    ckpt_contents c = contents(f, 2, "{}");
    int st = ckpt_save_atomic(path, &c, err, sizeof err);
    fprintf(stderr, "(expected) %s\n", err);
    return st == CKPT_E_IO && strstr(err, "previous checkpoints are untouched") ? 0 : 1;
}

static void test_disk_full(void **state) {
    fixture *f = *state;
    char path[512], copy[600], cmd[1400];
    ckpt_path_for_step(f->dir, 1, path, sizeof path);
    save_step(f, path, 1);
    snprintf(copy, sizeof copy, "%s/copy_of_1", f->dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    assert_int_equal(system(cmd), 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    /* Limits inside the superblock/metadata, inside the tensors, and just short of the end,
     * where only the final metadata flush at close can fail. */
    const rlim_t limits[4] = {512, 40000, (rlim_t)sb.st_size / 2, (rlim_t)sb.st_size - 64};
    for (int i = 0; i < 4; i++) {
        expect_child_under_fsize_limit(f, path, limits[i], save_new_weights_fails, 0,
                                       "save did not fail cleanly");
        snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, copy);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(count_named(f->dir, ".tmp."), 0);
    }
}

static void test_truncated_and_not_hdf5(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "cut.h5", path, sizeof path);
    save_step(f, path, 5);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    float *p2 = calloc(f->table.total, sizeof(float));
    const off_t cuts[3] = {sb.st_size - 1, sb.st_size / 2, 100};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(truncate(path, cuts[i]), 0);
        int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
        /* HDF5 itself notices a short file from the end-of-file address in the superblock. */
        expect_error(st, CKPT_E_OPEN, err, i < 2 ? "HDF5: truncated file: eof" : "truncated");
        assert_non_null(strstr(err, path));
        st = ckpt_verify(path, NULL, NULL, err, sizeof err);
        assert_int_equal(st, CKPT_E_OPEN);
    }
    FILE *t = fopen(path, "w");
    fputs("just some text, not HDF5\n", t);
    fclose(t);
    int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_OPEN, err, "not an HDF5 file");
    path_in(f, "absent.h5", path, sizeof path);
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_OPEN, err, "No such file");
    free(p2);
}

static void test_flipped_byte_names_tensor(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "flip.h5", path, sizeof path);
    const char *groups[3] = {"/params/", "/optim/m/", "/optim/v/"};
    size_t n = f->table.total;
    float *p2 = calloc(n, sizeof(float)), *m2 = calloc(n, sizeof(float)),
          *v2 = calloc(n, sizeof(float));
    for (int g = 0; g < 3; g++) {
        save_step(f, path, 9);
        const gdn_param *victim = &f->table.p[5 + 3 * g];
        char dset[160], want[200];
        snprintf(dset, sizeof dset, "%s%s", groups[g], victim->name);
        flip_byte(path, data_offset(path, dset) + 4 * (long long)(victim->numel / 2) + 1);
        snprintf(want, sizeof want, "checksum mismatch in %s", dset + 1);
        int st = ckpt_load(path, &f->cfg, &f->table, p2, m2, v2, NULL, err, sizeof err);
        expect_error(st, CKPT_E_CHECKSUM, err, want);
        st = ckpt_verify(path, NULL, NULL, err, sizeof err);
        expect_error(st, CKPT_E_CHECKSUM, err, want);
        /* Only the optimizer is damaged: a weights-only load still succeeds. */
        st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
        assert_int_equal(st, g == 0 ? CKPT_E_CHECKSUM : CKPT_OK);
        /* gdn inspect exits non-zero on the damaged file. */
        assert_int_equal(run_inspect_quiet(path), 1);
    }
    free(p2);
    free(m2);
    free(v2);
}

/* Rewrites root attribute name of path with an int64 or a string. */
static void set_root_attr(const char *path, const char *name, int64_t iv, const char *sv) {
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(file >= 0);
    assert_true(H5Adelete(file, name) >= 0);
    hid_t space = H5Screate(H5S_SCALAR), type = H5Tcopy(sv ? H5T_C_S1 : H5T_STD_I64LE);
    if (sv) H5Tset_size(type, strlen(sv) + 1);
    hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(
        H5Awrite(a, sv ? type : H5T_NATIVE_INT64, sv ? (const void *)sv : (const void *)&iv) >= 0);
    H5Aclose(a);
    H5Tclose(type);
    H5Sclose(space);
    H5Fclose(file);
}

/* Overwrites an existing attribute of obj (a path in the file) in place with the same type. */
static void poke_attr(const char *path, const char *obj, const char *name, const void *value,
                      hid_t mtype) {
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(file >= 0);
    hid_t o = H5Oopen(file, obj, H5P_DEFAULT);
    assert_true(o >= 0);
    hid_t a = H5Aopen(o, name, H5P_DEFAULT);
    assert_true(a >= 0);
    if (H5Awrite(a, mtype, value) < 0) {
        H5Eprint2(H5E_DEFAULT, stderr);
        fail_msg("cannot edit %s %s", obj, name);
    }
    H5Aclose(a);
    H5Oclose(o);
    H5Fclose(file);
}

static void test_wrong_format(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "fmt.h5", path, sizeof path);
    float *p2 = calloc(f->table.total, sizeof(float));
    save_step(f, path, 1);
    set_root_attr(path, "format_version", CKPT_FORMAT_VERSION + 1, NULL);
    int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_FORMAT, err, "format_version is 3");
    save_step(f, path, 1);
    set_root_attr(path, "format", 0, "other-format"); /* fixed-length string: read too */
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_FORMAT, err, "\"other-format\"");
    /* An HDF5 file that is not a checkpoint at all. */
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(file);
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_FORMAT, err, "not a gdn checkpoint");
    free(p2);
}

static void test_model_mismatch(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "model.h5", path, sizeof path);
    save_step(f, path, 1);
    float *p2 = calloc(f->table.total, sizeof(float));
    gdn_config other = f->cfg;
    other.d_model = 32;
    other.norm_eps = 1e-5;
    int st = ckpt_load(path, &other, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_MODEL, err, "d_model: checkpoint has 16, this run has 32");
    assert_non_null(strstr(
        err,
        "norm_eps: checkpoint has 9.9999999999999995e-07, this run has 1.0000000000000001e-05"));
    assert_null(strstr(err, "n_layers"));
    other = f->cfg;
    other.tie_embeddings = 1;
    st = ckpt_load(path, &other, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_MODEL, err, "tie_embeddings: checkpoint has 0, this run has 1");
    free(p2);
    /* NULL skips the comparison. */
    expect_weights(f, path, NULL, "a load without a model to compare");
}

static void test_missing_extra_and_reshaped_tensors(void **state) {
    fixture *f = *state;
    char path[512], err[2048], dset[160];
    path_in(f, "tensors.h5", path, sizeof path);
    float *p2 = calloc(f->table.total, sizeof(float));
    const char *name = f->table.p[2].name;

    save_step(f, path, 1);
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    snprintf(dset, sizeof dset, "/params/%s", name);
    assert_true(H5Ldelete(file, dset, H5P_DEFAULT) >= 0);
    H5Fclose(file);
    int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_TENSOR, err, name);
    assert_non_null(strstr(err, "is missing"));

    save_step(f, path, 1);
    file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t one = 1;
    hid_t space = H5Screate_simple(1, &one, NULL);
    hid_t d = H5Dcreate2(file, "/params/model.extra.weight", H5T_IEEE_F32LE, space, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(file);
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_TENSOR, err, "model.extra.weight is not a tensor of this run's model");
    /* verify (table-free) sees it as a tensor without a crc32. */
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_TENSOR, err, "model.extra.weight");

    save_step(f, path, 1);
    gdn_param saved = f->table.p[2];
    f->table.p[2].shape[0] = saved.shape[1]; /* same numel, transposed */
    f->table.p[2].shape[1] = saved.shape[0];
    st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    f->table.p[2] = saved;
    expect_error(st, CKPT_E_TENSOR, err, "has shape [8, 16], expected [16, 8]");
    free(p2);
}

static void test_find_resume_skips_damaged(void **state) {
    fixture *f = *state;
    char path[512], found[512], err[2048];
    int64_t step = -1;
    /* Missing directory, then an empty one: nothing to resume, no error. */
    char missing[512];
    path_in(f, "nothing_here", missing, sizeof missing);
    assert_int_equal(ckpt_find_resume(missing, found, sizeof found, &step, err, sizeof err), 0);
    assert_int_equal(ckpt_find_resume(f->dir, found, sizeof found, &step, err, sizeof err), 0);

    /* Steps compared as numbers: 123456789 (9 digits) is newer than 99999999. */
    const int64_t steps[4] = {100, 99999999, 200, 123456789};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ckpt_path_for_step(f->dir, steps[i], path, sizeof path), 0);
        save_step(f, path, steps[i]);
    }
    ckpt_path_for_step(f->dir, 123456789, path, sizeof path);
    assert_non_null(strstr(path, "/ckpt_123456789.h5"));
    /* Distractors: a newer temp file, an unrelated file, a near-miss name. */
    char junk[600];
    snprintf(junk, sizeof junk, "%s/ckpt_999999999.h5.tmp.1", f->dir);
    fclose(fopen(junk, "w"));
    snprintf(junk, sizeof junk, "%s/notes.txt", f->dir);
    fclose(fopen(junk, "w"));
    snprintf(junk, sizeof junk, "%s/ckpt_999999999.h5.bak", f->dir);
    fclose(fopen(junk, "w"));

    assert_int_equal(ckpt_find_resume(f->dir, found, sizeof found, &step, err, sizeof err), 1);
    assert_int_equal(step, 123456789);
    assert_string_equal(found, path);

    /* Damage the newest (data byte) and the next (truncation): resume falls back to 200. */
    char dset[160];
    snprintf(dset, sizeof dset, "/params/%s", f->table.p[0].name);
    flip_byte(path, data_offset(path, dset) + 10);
    ckpt_path_for_step(f->dir, 99999999, path, sizeof path);
    assert_int_equal(truncate(path, 4000), 0);
    assert_int_equal(ckpt_find_resume(f->dir, found, sizeof found, &step, err, sizeof err), 1);
    assert_int_equal(step, 200);
    ckpt_path_for_step(f->dir, 200, path, sizeof path);
    assert_string_equal(found, path);

    /* When every checkpoint is damaged the caller is told, not handed a fresh start. */
    flip_byte(path, data_offset(path, dset) + 10);
    ckpt_path_for_step(f->dir, 100, path, sizeof path);
    assert_int_equal(truncate(path, 10), 0);
    int st = ckpt_find_resume(f->dir, found, sizeof found, &step, err, sizeof err);
    assert_true(st < 0);
    assert_non_null(strstr(err, "none of the 4 checkpoints"));
}

static void test_prune(void **state) {
    fixture *f = *state;
    char path[512], err[2048], name[600];
    for (int64_t s = 10; s <= 50; s += 10) {
        ckpt_path_for_step(f->dir, s, path, sizeof path);
        save_step(f, path, s);
    }
    /* Temp files: of a dead process, of a live one (our parent), of ourselves while idle. */
    pid_t child = fork();
    if (child == 0) _exit(0);
    assert_true(child > 0);
    waitpid(child, NULL, 0);
    snprintf(name, sizeof name, "%s/ckpt_00000060.h5.tmp.%d", f->dir, (int)child);
    fclose(fopen(name, "w"));
    snprintf(name, sizeof name, "%s/ckpt_00000070.h5.tmp.%d", f->dir, (int)getppid());
    fclose(fopen(name, "w"));
    snprintf(name, sizeof name, "%s/ckpt_00000080.h5.tmp.%d", f->dir, (int)getpid());
    fclose(fopen(name, "w"));
    snprintf(name, sizeof name, "%s/other.h5.tmp.1", f->dir); /* not ours to touch */
    fclose(fopen(name, "w"));

    assert_int_equal(ckpt_prune(f->dir, 0, err, sizeof err), 2); /* keep all; two stale temps */
    assert_int_equal(count_named(f->dir, "^ckpt_000000[1-5]0.h5$"), 5);
    int removed = ckpt_prune(f->dir, 2, err, sizeof err);
    if (removed < 0) fail_msg("%s", err);
    assert_int_equal(removed, 3);
    assert_int_equal(count_named(f->dir, "^ckpt_000000[1-5]0.h5$"), 2);
    assert_int_equal(count_named(f->dir, "^ckpt_00000040.h5$"), 1);
    assert_int_equal(count_named(f->dir, "^ckpt_00000050.h5$"), 1);
    assert_int_equal(count_named(f->dir, "tmp"), 2); /* the live writer's and other.h5's */
    assert_int_equal(count_named(f->dir, "ckpt_00000070.h5.tmp"), 1);
    assert_int_equal(ckpt_prune(f->dir, 2, err, sizeof err), 0);
}

/* Every metadata item edited after the save (as h5py or a flipped byte would) is refused by
 * every reader, naming the item. */
static void test_metadata_edits_are_named(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    path_in(f, "meta.h5", path, sizeof path);
    float *p2 = calloc(f->table.total, sizeof(float));
    const int64_t big = 999999;
    const double eps = 1e-3;
    const char *vstr = "{\"run\": 2}";
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    H5Tset_cset(str, H5T_CSET_UTF8);
    struct {
        const char *obj, *name, *item;
        const void *value;
        hid_t mtype;
    } edits[] = {
        {"/", "step", "step", &big, H5T_NATIVE_INT64},
        {"/", "tokens_seen", "tokens_seen", &big, H5T_NATIVE_INT64},
        {"/", "config", "config", &vstr, str},
        {"/model_config", "d_model", "model_config/d_model", &big, H5T_NATIVE_INT64},
        {"/model_config", "norm_eps", "model_config/norm_eps", &eps, H5T_NATIVE_DOUBLE},
        {"/state", "data_position", "state/data_position", &big, H5T_NATIVE_INT64},
        {"/state", "schedule_step", "state/schedule_step", &big, H5T_NATIVE_INT64},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        save_step(f, path, 4);
        poke_attr(path, edits[i].obj, edits[i].name, edits[i].value, edits[i].mtype);
        char want[128];
        snprintf(want, sizeof want, "metadata checksum mismatch in %s", edits[i].item);
        int st = ckpt_load(path, NULL, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
        expect_error(st, CKPT_E_META, err, want);
        ckpt_info info;
        st = ckpt_read_info(path, &info, err, sizeof err);
        expect_error(st, CKPT_E_META, err, want);
        st = ckpt_verify(path, NULL, NULL, err, sizeof err);
        expect_error(st, CKPT_E_META, err, want);
        assert_int_equal(run_inspect_quiet(path), 1);
    }
    H5Tclose(str);
    /* /state/rng, a dataset. */
    save_step(f, path, 4);
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, "/state/rng", H5P_DEFAULT);
    uint64_t rng[5] = {1, 2, 3, 4, 5};
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng) >= 0);
    H5Dclose(d);
    /* An added /state value is named too. */
    H5Fclose(file);
    int st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_META, err, "state/rng");
    save_step(f, path, 4);
    file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(file, "/state", H5P_DEFAULT);
    char sub[256];
    assert_int_equal(io_h5_attr_write_i64(g, "extra", 1, sub, sizeof sub), 0);
    H5Gclose(g);
    H5Fclose(file);
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_META, err, "state/extra (not in the checksum list: added)");
    /* Removing the checksums of a version-2 file is refused... */
    save_step(f, path, 4);
    file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(H5Adelete(file, "meta_checksums") >= 0);
    H5Fclose(file);
    st = ckpt_load(path, NULL, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_META, err, "missing or unreadable");
    /* ...a version-1 file (no checksums) is read, with a warning on stderr. */
    file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(H5Adelete(file, "meta_crc32") >= 0);
    int64_t one = 1;
    hid_t a = H5Aopen(file, "format_version", H5P_DEFAULT);
    assert_true(H5Awrite(a, H5T_NATIVE_INT64, &one) >= 0);
    H5Aclose(a);
    H5Fclose(file);
    expect_weights(f, path, &f->cfg, "a version-1 file");
    /* Changing the version of a version-2 file to 1 does not switch the check off. */
    save_step(f, path, 4);
    poke_attr(path, "/", "format_version", &one, H5T_NATIVE_INT64);
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    expect_error(st, CKPT_E_META, err, "format_version");
    free(p2);
}

static void crash_hook(void) { raise(SIGSEGV); }
static void abort_hook(void) { abort(); }
static void hang_hook(void) {
    for (;;) pause();
}

/* A reader whose child process crashes or hangs (what libhdf5 does on some damaged metadata)
 * reports "damaged" and the calling process goes on. */
static void test_child_crash_and_hang_are_damage(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    ckpt_path_for_step(f->dir, 3, path, sizeof path);
    save_step(f, path, 3);
    float *p2 = calloc(f->table.total, sizeof(float));
    ckpt_guard_child_hook = crash_hook;
    int st = ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err);
    free(p2);
    expect_error(st, CKPT_E_DAMAGED, err, "damaged: ");
    assert_non_null(strstr(err, "crashed the HDF5 library (signal 11"));
    assert_non_null(strstr(err, path));
    ckpt_guard_child_hook = abort_hook;
    ckpt_info info;
    st = ckpt_read_info(path, &info, err, sizeof err);
    expect_error(st, CKPT_E_DAMAGED, err, "signal 6");
    assert_int_equal(run_inspect_quiet(path), 1);
    ckpt_guard_child_hook = hang_hook;
    setenv("GDN_CKPT_CHECK_TIMEOUT", "1", 1);
    st = ckpt_verify(path, NULL, NULL, err, sizeof err);
    unsetenv("GDN_CKPT_CHECK_TIMEOUT");
    expect_error(st, CKPT_E_DAMAGED, err, "did not finish within 1 s");
    /* resume skips a file whose check crashes... when every file crashes, none is usable. */
    ckpt_guard_child_hook = crash_hook;
    char found[512];
    int64_t step;
    st = ckpt_find_resume(f->dir, found, sizeof found, &step, err, sizeof err);
    ckpt_guard_child_hook = NULL;
    assert_int_equal(st, CKPT_E_DAMAGED);
    /* with the hook gone, the same file reads back whole */
    expect_weights(f, path, &f->cfg, "the file after the crashed checks");
}

/* Every reader runs its own operation in a child first, also right after another reader
 * succeeded on the same file: a damaged file can pass verify's path through libhdf5 and crash
 * read_info's, so no reader may be excused by an earlier success. The child hook counts the
 * children through a pipe; the verifying child runs the caller's callback too. */
static int child_count_fd = -1;
static pid_t caller_pid;
static void count_hook(void) {
    if (write(child_count_fd, "c", 1) != 1) _exit(9);
}
static int count_tensor(const ckpt_tensor_view *tv, void *user) {
    (void)tv;
    (void)user;
    if (write(child_count_fd, getpid() == caller_pid ? "T" : "t", 1) != 1) _exit(9);
    return 0;
}

static void test_every_reader_has_its_child(void **state) {
    fixture *f = *state;
    char path[512], err[2048];
    ckpt_path_for_step(f->dir, 5, path, sizeof path);
    save_step(f, path, 5);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    child_count_fd = fds[1];
    caller_pid = getpid();
    ckpt_guard_child_hook = count_hook;
    assert_int_equal(ckpt_verify(path, NULL, NULL, err, sizeof err), CKPT_OK);
    ckpt_info info;
    assert_int_equal(ckpt_read_info(path, &info, err, sizeof err), CKPT_OK);
    ckpt_info_free(&info);
    float *p2 = calloc(f->table.total, sizeof(float));
    assert_int_equal(ckpt_load(path, &f->cfg, &f->table, p2, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    free(p2);
    assert_int_equal(ckpt_verify(path, count_tensor, NULL, err, sizeof err), CKPT_OK);
    ckpt_guard_child_hook = NULL;
    close(fds[1]);
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    close(fds[0]);
    int children = 0, in_child = 0, in_caller = 0;
    for (ssize_t i = 0; i < n; i++) {
        children += buf[i] == 'c';
        in_child += buf[i] == 't';
        in_caller += buf[i] == 'T';
    }
    assert_int_equal(children, 4); /* verify, read_info, load, verify with a callback */
    /* the last child ran the caller's callback on every tensor the caller's run saw */
    assert_true(in_caller >= f->table.n);
    assert_int_equal(in_child, in_caller);
}

/* Flipped bytes in HDF5 metadata: every reader answers (ok with the right contents, or an
 * error), none crashes this process. Some of these flips crash libhdf5 1.10 itself. */
static void test_flipped_metadata_never_crashes(void **state) {
    fixture *f = *state;
    char path[512], bad[600], err[2048];
    path_in(f, "orig.h5", path, sizeof path);
    snprintf(bad, sizeof bad, "%s/bad.h5", f->dir);
    save_step(f, path, 6);
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    unsigned char *data = malloc((size_t)n);
    fseek(fp, 0, SEEK_SET);
    assert_int_equal(fread(data, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    size_t total = f->table.total;
    float *p2 = malloc(total * sizeof(float)), *m2 = malloc(total * sizeof(float)),
          *v2 = malloc(total * sizeof(float));
    uint64_t seed = 12345;
    int ok = 0, errors = 0, damaged = 0;
    for (int k = 0; k < 80; k++) {
        unsigned char *b = malloc((size_t)n);
        memcpy(b, data, (size_t)n);
        for (int j = 0; j < 2; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            long off = (long)((seed >> 33) % (uint64_t)n);
            b[off] ^= (unsigned char)(1u << ((seed >> 20) & 7));
        }
        fp = fopen(bad, "wb");
        fwrite(b, 1, (size_t)n, fp);
        fclose(fp);
        free(b);
        ckpt_info info;
        int st = ckpt_load(bad, &f->cfg, &f->table, p2, m2, v2, &info, err, sizeof err);
        if (st == CKPT_OK) {
            /* Accepted: then everything must be exactly what was saved. */
            assert_memory_equal(p2, f->params, total * sizeof(float));
            assert_memory_equal(m2, f->m, total * sizeof(float));
            assert_memory_equal(v2, f->v, total * sizeof(float));
            assert_int_equal(info.step, 6);
            assert_int_equal(info.tokens_seen, 6 * 4096 + (INT64_C(1) << 40));
            ckpt_info_free(&info);
            ok++;
        } else {
            assert_true(err[0] != '\0');
            errors++;
            damaged += st == CKPT_E_DAMAGED;
        }
        st = ckpt_verify(bad, NULL, NULL, err, sizeof err);
        assert_true(st == CKPT_OK || err[0] != '\0');
    }
    printf("flipped metadata: %d accepted intact, %d refused (%d of them crashed libhdf5 in the "
           "child)\n", ok, errors, damaged);
    free(data);
    free(p2);
    free(m2);
    free(v2);
}

/* A save that fails on a full file system leaves nothing open: the process then exits
 * normally (libhdf5's exit handler crashed on a half-closed file before). */
static int save_too_large(fixture *f, const char *path) {
    char err[2048];
    ckpt_contents c = contents(f, 1, "{}");
    int st = ckpt_save_atomic(path, &c, err, sizeof err);
    return st == CKPT_E_IO && strstr(err, "File too large") ? 0 : 1;
}

static void test_failed_save_then_clean_exit(void **state) {
    fixture *f = *state;
    char path[512];
    ckpt_path_for_step(f->dir, 1, path, sizeof path);
    const rlim_t limits[3] = {512, 40000, 100000};
    for (int i = 0; i < 3; i++) {
        /* exit() runs the atexit handlers, libhdf5's among them */
        expect_child_under_fsize_limit(f, path, limits[i], save_too_large, 1,
                                       "the process did not exit cleanly");
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(count_named(f->dir, ".tmp."), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_bitwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weights_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_is_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_and_not_hdf5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte_names_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_extra_and_reshaped_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_resume_skips_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metadata_edits_are_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_child_crash_and_hang_are_damage, setup, teardown),
cmocka_unit_test_setup_teardown(test_every_reader_has_its_child, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_metadata_never_crashes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_save_then_clean_exit, setup, teardown),
    };
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
