/* Activation codes and their scalar definitions, shared by elementwise kernels and fused epilogues.
 *
 * Parameters follow ONNX: LeakyRelu(alpha), Clip(min, max), HardSigmoid(alpha, beta); HardSwish is
 * x * HardSigmoid(x; 1/6, 1/2); HardSwishAffine is p0 * HardSwish(x) + p1 (one fused multiply-add: PP-OCRv4's LCNetV3
 * follows every HardSwish with a learnable scalar affine, which a padded consumer cannot absorb); Gelu is the unary kernels' erf form (elementwise.h ORTX_UNARY_GELU). Vectorised variants live beside each kernel and are checked against these.
 */
#ifndef ORTX_ACTIVATION_H
#define ORTX_ACTIVATION_H

#include <math.h>

enum {
    ORTX_ACT_NONE = 0,
    ORTX_ACT_RELU = 1,
    ORTX_ACT_LEAKY_RELU = 2,  /* p0 = alpha */
    ORTX_ACT_CLIP = 3,        /* p0 = min, p1 = max */
    ORTX_ACT_SIGMOID = 4,
    ORTX_ACT_HARD_SIGMOID = 5, /* p0 = alpha, p1 = beta */
    ORTX_ACT_HARD_SWISH = 6,
    ORTX_ACT_TANH = 7,
    ORTX_ACT_GELU = 8,        /* 0.5 x (1 + erf(x / sqrt 2)), ONNX Gelu (approximate "none") */
    ORTX_ACT_HARD_SWISH_AFFINE = 9, /* p0 = scale, p1 = shift */
};

static inline float ortx_activation_scalar(int code, float x, float p0, float p1) {
    switch (code) {
        case ORTX_ACT_RELU: return x > 0.0f ? x : 0.0f;
        case ORTX_ACT_LEAKY_RELU: return x >= 0.0f ? x : p0 * x;
        case ORTX_ACT_CLIP: return x < p0 ? p0 : (x > p1 ? p1 : x);
        case ORTX_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
        case ORTX_ACT_HARD_SIGMOID: { float y = p0 * x + p1; return y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y); }
        case ORTX_ACT_HARD_SWISH: { float y = x / 6.0f + 0.5f; y = y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y); return x * y; }
        case ORTX_ACT_HARD_SWISH_AFFINE: {
            float y = x / 6.0f + 0.5f;
            y = y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y);
            return fmaf(p0, x * y, p1);
        }
        case ORTX_ACT_TANH: return tanhf(x);
        case ORTX_ACT_GELU: return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
        default: return x;
    }
}

#endif
