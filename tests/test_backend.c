/* The CPU backend behind the table of model/backend.h against the CPU model and optimizer called
 * directly: forward loss, logits, gradients, captured hidden states, the AdamW step (clipped and
 * not) and the sharded AdamW range, all bitwise; the teacher-forced mixer fed by the teacher
 * model against the same through the host, bitwise; memory figures. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/backend.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "tests/mixer_teacher_check.h"
#include "train/optim.h"

enum { B = 2, T = 21 }; /* T spans a partial second chunk */

static gdn_config config(void) {
    return (gdn_config){.vocab_size = 40, .d_model = 16, .n_layers = 3, .n_heads = 2, .head_dim = 8,
                        .expand_v = 1, .d_ff = 32, .conv_width = 4, .chunk_size = 16, .norm_eps = 1e-6};
}

typedef struct {
    gdn_param_table t;
    float *params;
    int tokens[B * T], targets[B * T];
} fixture;

static void fixture_init(fixture *f) {
    gdn_config c = config();
    gdn_param_table_build(&f->t, &c);
    f->params = malloc(f->t.total * sizeof(float));
    gdn_params_init(f->params, &f->t, 5);
    for (int i = 0; i < B * T; i++) {
        f->tokens[i] = (i * 7 + 3) % c.vocab_size;
        f->targets[i] = i % 5 == 2 ? -1 : (i * 11 + 1) % c.vocab_size;
    }
}

static void fixture_free(fixture *f) {
    free(f->params);
    gdn_param_table_free(&f->t);
}

/* A CPU backend model of the given shape holding the fixture's parameters. */
static gdn_model *fixture_model(const fixture *f, gdn_model_shape shape) {
    gdn_model *m = gdn_backend_cpu.create(&f->t, &shape);
    gdn_backend_cpu.upload(m, f->params, NULL, NULL);
    return m;
}

/* One training pass through the table: zeroed gradients, forward with loss scale 1, backward. */
static void forward_backward(gdn_model *m, const fixture *f, gdn_grads_ready_fn ready, void *ctx) {
    gdn_backend_cpu.zero_grads(m);
    gdn_backend_cpu.forward(m, f->tokens, f->targets, 1.0f, NULL, NULL);
    gdn_backend_cpu.backward(m, ready, ctx);
}

/* Forward, logits, backward and captured hidden states through the table equal the direct calls. */
static void test_forward_backward_capture(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    const size_t n = f.t.total, D = (size_t)f.t.cfg.d_model, V = (size_t)f.t.cfg.vocab_size;
    const gdn_backend *be = &gdn_backend_cpu;
    gdn_model_shape shape = {.B = B, .T = T, .precision = GDN_PRECISION_FP32};
    gdn_model *m = be->create(&f.t, &shape);
    assert_true(m->backend == be && m->shape.lo == 0 && m->shape.hi == n && m->shape.padded == n);
    be->upload(m, f.params, NULL, NULL);

    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&f.t, B, T);
    float *g_ref = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));
    int nv_ref = 0, nv = 0;
    const double l_ref = gdn_cpu_forward_f32(a, &f.t, f.params, f.tokens, f.targets, 0.01f, &nv_ref, NULL, NULL);
    gdn_cpu_backward_f32(a, &f.t, f.params, g_ref);

    const int layers[3] = {-1, 0, 2};
    float *hid[3];
    for (int i = 0; i < 3; i++) hid[i] = malloc((size_t)B * T * D * sizeof(float));
    gdn_capture cap = {3, layers, hid, NULL};
    be->zero_grads(m);
    const double l = be->forward(m, f.tokens, f.targets, 0.01f, &nv, &cap);
    be->backward(m, NULL, NULL);
    be->download_grads(m, g);
    assert_true(l == l_ref && nv == nv_ref);
    assert_memory_equal(g, g_ref, n * sizeof(float));
    for (int i = 0; i < 3; i++)
        assert_memory_equal(hid[i], gdn_cpu_hidden_f32(a, layers[i]), (size_t)B * T * D * sizeof(float));
    /* the embedding's output is the embedding row of each token */
    for (size_t j = 0; j < D; j++) assert_true(hid[0][D + j] == f.params[f.t.embed + (size_t)f.tokens[1] * D + j]);

    /* logits of a forward pass with grad_scale 0 */
    float *lg = malloc((size_t)B * T * V * sizeof(float));
    gdn_cpu_forward_f32(a, &f.t, f.params, f.tokens, NULL, 0.0f, NULL, NULL, NULL); /* n_valid may be NULL */
    be->forward(m, f.tokens, NULL, 0.0f, NULL, NULL);
    be->logits(m, lg);
    assert_memory_equal(lg, gdn_cpu_logits_f32(a), (size_t)B * T * V * sizeof(float));

    size_t pb = 0, ab = 0;
    be->memory(m, &pb, &ab);
    assert_int_equal(pb, 4 * n * sizeof(float));
    assert_true(ab >= gdn_cpu_acts_bytes_f32(a) && ab > (size_t)B * T * V * sizeof(float));
    assert_null(be->stream(m));
    for (int i = 0; i < 3; i++) free(hid[i]);
    free(lg);
    free(g);
    free(g_ref);
    gdn_cpu_acts_free_f32(a);
    be->free(m);
    fixture_free(&f);
}

/* mixer_mse with the teacher model (gdn_mixer_targets.teacher) gives bitwise the squared error and
 * gradients of the same stream and target passed through the host from the teacher's capture. */
static void test_mixer_teacher_model(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    gdn_model_shape shape = {.B = B, .T = T, .precision = GDN_PRECISION_FP32};
    float *sp = malloc(f.t.total * sizeof(float));
    gdn_params_init(sp, &f.t, 9); /* a student unlike its teacher */
    assert_true(mixer_teacher_same_bits(&gdn_backend_cpu, &f.t, &shape, f.params, sp, f.tokens));
    free(sp);
    fixture_free(&f);
}

static jmp_buf die_jump;
static char die_message[512];
static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

/* mixer_mse on targets `fit` for layer `layer`: 1 when it stops with a message naming `what`. */
static int mixer_mse_refuses(gdn_model *m, int layer, const gdn_mixer_targets *fit, const char *what) {
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    int died = 0;
    if (setjmp(die_jump) == 0) gdn_backend_cpu.mixer_mse(m, layer, fit, 0.0f);
    else died = 1;
    gdn_set_die_handler(NULL);
    return died && strstr(die_message, what) != NULL;
}

/* Targets that are not one of the two ways in, or a teacher of another shape, stop with a message. */
static void test_mixer_targets_refused(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    const gdn_model_shape shape = {.B = B, .T = T};
    gdn_model *m = fixture_model(&f, shape), *tm = fixture_model(&f, shape);
    gdn_model *shorter = fixture_model(&f, (gdn_model_shape){.B = B, .T = T - 1});
    const size_t n = (size_t)B * T * f.t.cfg.d_model;
    float *x = calloc(n, sizeof(float)), *target = calloc(n, sizeof(float));
    gdn_backend_cpu.forward(tm, f.tokens, NULL, 0.0f, NULL, NULL);
    const gdn_mixer_targets none = {0}, x_only = {.x_in = x}, both = {.x_in = x, .target = target, .teacher = tm};
    const gdn_mixer_targets other = {.teacher = shorter}, own = {.teacher = tm};
    assert_true(mixer_mse_refuses(m, 1, &none, "give either"));
    assert_true(mixer_mse_refuses(m, 1, &x_only, "give either"));
    assert_true(mixer_mse_refuses(m, 1, &both, "give either"));
    assert_true(mixer_mse_refuses(m, 1, &other, "the teacher has micro-batches"));
    assert_true(mixer_mse_refuses(m, 3, &own, "(layer 3)"));
    /* the right way in runs: the student is its teacher's copy, so its mixer matches exactly */
    assert_true(gdn_backend_cpu.mixer_mse(m, 1, &own, 0.0f) == 0.0);
    free(x);
    free(target);
    gdn_backend_cpu.free(m);
    gdn_backend_cpu.free(tm);
    gdn_backend_cpu.free(shorter);
    fixture_free(&f);
}

/* The ready callback covers the whole buffer once, at the end of the backward pass. */
static void on_ready(void *ctx, float *grads, size_t lo, size_t hi) {
    size_t *seen = ctx;
    assert_non_null(grads);
    seen[0]++;
    seen[1] = lo;
    seen[2] = hi;
}

static void test_ready_callback(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    gdn_model *m = fixture_model(&f, (gdn_model_shape){.B = B, .T = T});
    size_t seen[3] = {0, 1, 0};
    forward_backward(m, &f, on_ready, seen);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 0);
    assert_int_equal(seen[2], f.t.total);
    gdn_backend_cpu.free(m);
    fixture_free(&f);
}

/* write_range: the range of the parameters or gradients takes the values (or zeros), and nothing
 * outside it changes. */
static void test_write_range(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    gdn_model *m = fixture_model(&f, (gdn_model_shape){.B = B, .T = T});
    forward_backward(m, &f, NULL, NULL);
    const size_t n = f.t.total, lo = n / 3, hi = n / 2;
    float *g0 = malloc(n * sizeof(float)), *g1 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    float *src = malloc((hi - lo) * sizeof(float));
    for (size_t i = 0; i < hi - lo; i++) src[i] = (float)i * 0.25f - 3.0f;
    gdn_backend_cpu.download_grads(m, g0);
    gdn_backend_cpu.write_range(m, 1, lo, hi, NULL);
    gdn_backend_cpu.write_range(m, 0, lo, hi, src);
    gdn_backend_cpu.params_changed(m);
    gdn_backend_cpu.download_grads(m, g1);
    gdn_backend_cpu.download(m, p1, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        const int in = i >= lo && i < hi;
        assert_true(in ? g1[i] == 0.0f : g1[i] == g0[i]);
        assert_true(in ? p1[i] == src[i - lo] : p1[i] == f.params[i]);
    }
    free(g0);
    free(g1);
    free(p1);
    free(src);
    gdn_backend_cpu.free(m);
    fixture_free(&f);
}

/* AdamW through the table: the unsharded step (with and without clipping) equals the optimizer's
 * norm, clip and update; a shard [lo, hi) equals the range update with the same clip factor. */
static void test_adamw(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    const size_t n = f.t.total;
    const gdn_adamw_hparams h = {1e-2, 0.9, 0.95, 1e-8, 0.1};
    float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *mm = calloc(n, sizeof(float)),
          *vv = calloc(n, sizeof(float)), *out = malloc(n * sizeof(float)), *om = malloc(n * sizeof(float)),
          *ov = malloc(n * sizeof(float));
    memcpy(p, f.params, n * sizeof(float));
    gdn_model *m = fixture_model(&f, (gdn_model_shape){.B = B, .T = T});
    for (int step = 1; step <= 2; step++) {
        forward_backward(m, &f, NULL, NULL);
        gdn_backend_cpu.download_grads(m, g);
        const double clip = step == 2 ? 0.25 * gdn_grad_norm(g, n) : 0.0; /* step 2 clips */
        const double norm = gdn_grad_norm(g, n);
        if (clip > 0 && norm > clip) gdn_grad_scale(g, n, (float)(clip / norm));
        gdn_adamw_update(&f.t, p, g, mm, vv, &h, step);
        const double gn = gdn_backend_cpu.adamw_step(m, &h, step, clip);
        assert_true(gn == norm);
        gdn_backend_cpu.download(m, out, om, ov);
        assert_memory_equal(out, p, n * sizeof(float));
        assert_memory_equal(om, mm, n * sizeof(float));
        assert_memory_equal(ov, vv, n * sizeof(float));
    }
    gdn_backend_cpu.free(m);

    /* a shard cutting tensors, padded buffers */
    const size_t lo = n / 3, hi = 2 * n / 3 + 1, padded = n + 3;
    gdn_model *s = fixture_model(&f, (gdn_model_shape){.B = B, .T = T, .lo = lo, .hi = hi, .padded = padded});
    forward_backward(s, &f, NULL, NULL);
    memcpy(g, gdn_backend_cpu.grads(s), n * sizeof(float));
    const double sumsq = gdn_backend_cpu.grad_sumsq(s);
    assert_true(sumsq == gdn_grad_sumsq(g + lo, hi - lo));
    const double gnorm = 2.0 * sqrt(sumsq); /* a global norm above the clip */
    memcpy(p, f.params, n * sizeof(float));
    memset(mm, 0, n * sizeof(float));
    memset(vv, 0, n * sizeof(float));
    gdn_grad_scale(g + lo, hi - lo, (float)(0.5 / gnorm));
    gdn_adamw_update_range(&f.t, lo, hi, p + lo, g + lo, mm, vv, &h, 1);
    gdn_backend_cpu.adamw_shard(s, &h, 1, gnorm, 0.5);
    gdn_backend_cpu.download(s, out, om, ov);
    assert_memory_equal(out, p, n * sizeof(float));
    assert_memory_equal(om, mm, (hi - lo) * sizeof(float));
    assert_memory_equal(ov, vv, (hi - lo) * sizeof(float));
    for (size_t i = n; i < padded; i++) assert_true(gdn_backend_cpu.params(s)[i] == 0.0f);
    gdn_backend_cpu.free(s);
    free(p);
    free(g);
    free(mm);
    free(vv);
    free(out);
    free(om);
    free(ov);
    fixture_free(&f);
}

/* A build without CUDA has no CUDA backend and sees no GPU. */
static void test_no_cuda_backend(void **state) {
    (void)state;
    if (!gdn_backend_cuda()) assert_int_equal(gdn_backend_gpu_count(), 0);
    else assert_string_equal(gdn_backend_cuda()->name, "cuda");
    assert_string_equal(gdn_backend_cpu.name, "cpu");
}

/* Documents through the table: the CPU backend accepts starts inside rows and runs them as the
 * CPU model does (bitwise); NULL switches back to whole rows. */
static void test_doc_starts(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    const size_t n = f.t.total;
    const gdn_backend *be = &gdn_backend_cpu;
    gdn_model *m = fixture_model(&f, (gdn_model_shape){.B = B, .T = T, .precision = GDN_PRECISION_FP32});
    unsigned char st[B * T] = {0};
    st[3] = st[17] = st[T + 1] = st[T + 16] = 1;
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&f.t, B, T), *plain = gdn_cpu_acts_create_f32(&f.t, B, T);
    gdn_cpu_acts_set_doc_starts_f32(a, st);
    float *g_ref = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float)), *g0 = calloc(n, sizeof(float));
    int nv = 0;
    const double l_ref = gdn_cpu_forward_f32(a, &f.t, f.params, f.tokens, f.targets, 0.01f, &nv, NULL, NULL);
    gdn_cpu_backward_f32(a, &f.t, f.params, g_ref);
    const double l_plain = gdn_cpu_forward_f32(plain, &f.t, f.params, f.tokens, f.targets, 0.01f, &nv, NULL, NULL);
    gdn_cpu_backward_f32(plain, &f.t, f.params, g0);
    assert_int_equal(be->set_doc_starts(m, st), 0);
    be->zero_grads(m);
    const double l = be->forward(m, f.tokens, f.targets, 0.01f, NULL, NULL);
    be->backward(m, NULL, NULL);
    be->download_grads(m, g);
    assert_true(l == l_ref && l != l_plain);
    assert_memory_equal(g, g_ref, n * sizeof(float));
    assert_int_equal(be->set_doc_starts(m, NULL), 0);
    be->zero_grads(m);
    assert_true(be->forward(m, f.tokens, f.targets, 0.01f, NULL, NULL) == l_plain);
    be->backward(m, NULL, NULL);
    be->download_grads(m, g);
    assert_memory_equal(g, g0, n * sizeof(float));
    gdn_cpu_acts_free_f32(a);
    gdn_cpu_acts_free_f32(plain);
    free(g_ref), free(g), free(g0);
    be->free(m);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward_capture),
        cmocka_unit_test(test_mixer_teacher_model),
        cmocka_unit_test(test_mixer_targets_refused),
        cmocka_unit_test(test_ready_callback),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_write_range),
        cmocka_unit_test(test_doc_starts),
        cmocka_unit_test(test_no_cuda_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
