/* Opening cuBLASLt at first use (cublaslt_load.cuh says why). The paths tried, in order:
 *   $GDN_CUBLASLT          a file named by the user (an unusual install; the tests' bad path)
 *   GDN_CUBLASLT_DIR/SONAME the library the build found (CMake passes both)
 *   SONAME                 the loader's search (LD_LIBRARY_PATH, the cache, the RUNPATH) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cublaslt_load.cuh"
#include "model/cuda/cuda_check.h"
#include "model/cuda/ops_cuda.h"

#ifndef GDN_CUBLASLT_SONAME
#error "the build passes GDN_CUBLASLT_SONAME (the cuBLASLt library's soname, e.g. libcublasLt.so.13)"
#endif
#ifndef GDN_CUBLASLT_DIR
#define GDN_CUBLASLT_DIR ""
#endif

/* Tries one path: 0 with every function in *api, else -1 and the reason appended to err. */
static int try_open(const char *path, gdn_cublaslt_api *api, char *err, size_t err_len) {
    const size_t used = strlen(err);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err + used, err_len - used, "\n  %s: %s", path, dlerror());
        return -1;
    }
    const char *missing = NULL;
#define GDN_CUBLASLT_SYM(name)                                                                    \
    if (!missing && !(api->name = (decltype(api->name))dlsym(h, "cublasLt" #name))) missing = "cublasLt" #name;
    GDN_CUBLASLT_FUNCS(GDN_CUBLASLT_SYM)
#undef GDN_CUBLASLT_SYM
    if (missing) {
        snprintf(err + used, err_len - used, "\n  %s: has no %s (not cuBLASLt, or too old)", path, missing);
        dlclose(h);
        return -1;
    }
    return 0; /* kept open for the program's life */
}

/* Fills *api from the first path that opens: 0 (and that path in path, when given), or -1 with
 * every path's reason in err. */
static int open_api(gdn_cublaslt_api *api, char *path, size_t path_len, char *err, size_t err_len) {
    char found[4096];
    const char *env = getenv("GDN_CUBLASLT");
    const char *paths[2];
    int n = 0;
    if (env && *env) {
        paths[n++] = env;
    } else {
        if (GDN_CUBLASLT_DIR[0]) {
            snprintf(found, sizeof found, "%s/%s", GDN_CUBLASLT_DIR, GDN_CUBLASLT_SONAME);
            paths[n++] = found;
        }
        paths[n++] = GDN_CUBLASLT_SONAME;
    }
    err[0] = '\0';
    for (int i = 0; i < n; i++)
        if (try_open(paths[i], api, err, err_len) == 0) {
            if (path) snprintf(path, path_len, "%s", paths[i]);
            return 0;
        }
    return -1;
}

extern "C" int gdn_cuda_cublaslt_probe(char *path, size_t path_len, char *err, size_t err_len) {
    gdn_cublaslt_api api;
    return open_api(&api, path, path_len, err, err_len);
}

const gdn_cublaslt_api *gdn_cublaslt(void) {
    static gdn_cublaslt_api api;
    static const int ok = [] {
        char err[8192];
        if (open_api(&api, NULL, 0, err, sizeof err) == 0) return 1;
        GDN_CUDA_DIE("cannot load cuBLASLt, which the CUDA backend's matrix products need; tried:%s\n"
                     "Install the CUDA toolkit's cuBLAS (%s), add its directory to LD_LIBRARY_PATH, or "
                     "name the file in GDN_CUBLASLT.", err, GDN_CUBLASLT_SONAME);
        return 0;
    }();
    (void)ok;
    return &api;
}
