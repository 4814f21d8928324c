/* Names of the training precisions (gdn_precision, model/backend.h). */
#include <string.h>

#include "model/backend.h"

static const char *const names[] = {[GDN_PRECISION_BF16] = "bf16", [GDN_PRECISION_FP32] = "fp32"};

int gdn_precision_parse(const char *name, gdn_precision *out) {
    for (int p = 0; name && p < (int)(sizeof names / sizeof names[0]); p++)
        if (strcmp(names[p], name) == 0) {
            *out = (gdn_precision)p;
            return 0;
        }
    return -1;
}

const char *gdn_precision_name(gdn_precision p) {
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "invalid";
}
