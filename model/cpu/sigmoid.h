/* Overflow-free sigmoid and SiLU for the CPU ops (include after model/real.h). */
#ifndef GDN_CPU_SIGMOID_H
#define GDN_CPU_SIGMOID_H

/* exp of a non-positive argument never overflows, and no 1 - sigmoid cancels for x << 0. */
static inline real R(gdn_sigmoid)(real x) {
    real e = REXP(x >= 0 ? -x : x);
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/* silu(x) = x sigmoid(x). */
static inline real R(gdn_silu)(real x) { return x * R(gdn_sigmoid)(x); }

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x). */
static inline real R(gdn_dsilu)(real x) {
    real s = R(gdn_sigmoid)(x);
    return s * (1 + x * (1 - s));
}

#endif
