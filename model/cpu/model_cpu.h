/* The GDN language model on the CPU (forward, hand-written backward) for both precisions:
 * names end in _f32 (training) or _f64 (gradient checks). */
#ifndef GDN_MODEL_CPU_H
#define GDN_MODEL_CPU_H

#include "model/cpu/ops_cpu.h"
#include "model/params.h"
#include "model/seq_hooks.h"

#define GDN_OPS_REAL float
#define GDN_OPS_R(name) name##_f32
#include "model/cpu/model_cpu_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#define GDN_OPS_REAL double
#define GDN_OPS_R(name) name##_f64
#include "model/cpu/model_cpu_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#endif
