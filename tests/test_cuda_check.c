/* The CUDA sources' fatal errors go through gdn_die_at like every other one, so that a handler
 * (gdn_comm_abort in an MPI job) sees them instead of a bare exit on one rank. Needs no GPU:
 * the failures here are a given error code and host-side input checks in the .cu files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/check.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/model_cuda.h"
#include "model/cuda/ops_cuda.h"
#include "model/params.h"

static jmp_buf die_jump;
static char die_message[2048];

static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

static void expect_message(const char *want_file, const char *want_text) {
    gdn_set_die_handler(NULL);
    if (!strstr(die_message, want_file) || !strstr(die_message, want_text) || strncmp(die_message, "error (", 7))
        fail_msg("message \"%s\" lacks \"error (\", \"%s\" or \"%s\"", die_message, want_file, want_text);
}

/* A failed CUDA call: the handler gets "error (FILE:LINE): CUDA error in CALL: STRING". */
static void test_cuda_check_reports_through_handler(void **state) {
    (void)state;
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        GDN_CUDA_CHECK(cudaErrorMemoryAllocation);
        gdn_set_die_handler(NULL);
        fail_msg("GDN_CUDA_CHECK returned on an error");
    }
    expect_message("test_cuda_check.c:", "CUDA error in cudaErrorMemoryAllocation: ");
}

static void test_cuda_die_reports_through_handler(void **state) {
    (void)state;
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        GDN_CUDA_DIE("bad input %d", 7);
        gdn_set_die_handler(NULL);
        fail_msg("GDN_CUDA_DIE returned");
    }
    expect_message("test_cuda_check.c:", "bad input 7");
}

/* The same from code compiled by nvcc: the delta rule's shape check and the model's input checks. */
static void test_cu_sources_report_through_handler(void **state) {
    (void)state;
    const gdn_delta_shape s = {.B = 1, .T = 64, .H = 4, .K = 64, .V = 64, .chunk = 64, .qk_heads = 3};
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        gdn_cuda_delta_check_shape(&s);
        gdn_set_die_handler(NULL);
        fail_msg("qk_heads=3 of 4 heads accepted");
    }
    expect_message("delta_launch.cu:", "qk_heads=3");

    /* documents: the CUDA kernels do not reset, so a shape with a doc array is refused */
    static const int doc[64] = {0};
    const gdn_delta_shape sd = {.B = 1, .T = 64, .H = 4, .K = 64, .V = 64, .chunk = 64, .doc = doc};
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        gdn_cuda_delta_check_shape(&sd);
        gdn_set_die_handler(NULL);
        fail_msg("a shape with documents accepted by the CUDA delta rule");
    }
    expect_message("delta_launch.cu:", "documents");

    const gdn_config c = {.vocab_size = 32, .d_model = 16, .n_layers = 1, .n_heads = 2, .head_dim = 8,
                          .expand_v = 2, .d_ff = 32, .conv_width = 4, .chunk_size = 16, .norm_eps = 1e-6};
    static gdn_param_table t; /* static: kept across the longjmp */
    gdn_param_table_build(&t, &c);
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        gdn_cuda_model_create(&t, 0, 8, GDN_CUDA_FP32);
        gdn_set_die_handler(NULL);
        gdn_param_table_free(&t);
        fail_msg("batch 0 accepted");
    }
    gdn_param_table_free(&t);
    expect_message("model_cuda_setup.cu:", "batch 0 x length 8");
}

/* cuBLASLt is opened at first use, not linked: the build's library opens and has every function
 * gdn calls; a path that does not exist, or a library that is not cuBLASLt, is refused with the
 * path and the reason (the message the CUDA backend stops with). Needs no GPU. */
static void test_cublaslt_opens_at_first_use(void **state) {
    (void)state;
    char path[4096], err[8192];
    unsetenv("GDN_CUBLASLT");
    assert_int_equal(gdn_cuda_cublaslt_probe(path, sizeof path, err, sizeof err), 0);
    assert_non_null(strstr(path, "libcublasLt.so."));
    setenv("GDN_CUBLASLT", "/nonexistent/libcublasLt.so.99", 1);
    assert_int_equal(gdn_cuda_cublaslt_probe(path, sizeof path, err, sizeof err), -1);
    if (!strstr(err, "/nonexistent/libcublasLt.so.99: ")) fail_msg("reason: \"%s\"", err);
    setenv("GDN_CUBLASLT", "libm.so.6", 1); /* opens, but is not cuBLASLt */
    assert_int_equal(gdn_cuda_cublaslt_probe(path, sizeof path, err, sizeof err), -1);
    if (!strstr(err, "libm.so.6: has no cublasLtCreate")) fail_msg("reason: \"%s\"", err);
    unsetenv("GDN_CUBLASLT");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_check_reports_through_handler),
        cmocka_unit_test(test_cuda_die_reports_through_handler),
        cmocka_unit_test(test_cu_sources_report_through_handler),
        cmocka_unit_test(test_cublaslt_opens_at_first_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
