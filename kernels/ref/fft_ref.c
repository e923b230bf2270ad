/* Oracles of the "fft" family: the DFT by its definition, O(n^2) per transform in double precision, no threads;
 * layouts in kernels/fft.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* X[k] = sum_t x[t] exp(sign 2 pi i k t / n), t < min(n, length); the angle's k t is reduced mod n first. */
static void naive_dft(const double *re, const double *im, int64_t length, int64_t n, int sign, int64_t bins,
                      double *out_re, double *out_im) {
    const int64_t count = length < n ? length : n;
    for (int64_t k = 0; k < bins; k++) {
        double sum_re = 0.0, sum_im = 0.0;
        for (int64_t t = 0; t < count; t++) {
            const double angle = sign * 2.0 * M_PI * (double)((k * t) % n) / (double)n;
            const double c = cos(angle), s = sin(angle);
            sum_re += re[t] * c - im[t] * s;
            sum_im += re[t] * s + im[t] * c;
        }
        out_re[k] = sum_re;
        out_im[k] = sum_im;
    }
}

void ortx_dft_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    const int64_t n = ints[0], input_length = ints[1], outer = ints[2], inner = ints[3], bins = ints[5];
    const int input_complex = (int)ints[4], sign = ints[6] ? 1 : -1;
    const int64_t channels = input_complex ? 2 : 1;
    const float *x = buffers[0];
    float *y = buffers[1];
    double *work = malloc((size_t)(2 * input_length + 2 * bins + 2) * sizeof(double));
    if (!work) return;
    double *re = work, *im = work + input_length, *out_re = im + input_length, *out_im = out_re + bins;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t t = 0; t < input_length; t++) {
                const float *value = x + ((o * input_length + t) * inner + i) * channels;
                re[t] = value[0];
                im[t] = input_complex ? value[1] : 0.0;
            }
            naive_dft(re, im, input_length, n, sign, bins, out_re, out_im);
            for (int64_t k = 0; k < bins; k++) {
                y[((o * bins + k) * inner + i) * 2] = (float)(out_re[k] * floats[0]);
                y[((o * bins + k) * inner + i) * 2 + 1] = (float)(out_im[k] * floats[0]);
            }
        }
    free(work);
}

void ortx_stft_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t batch = ints[0], signal_length = ints[1], frame_step = ints[3], frame_length = ints[4];
    const int64_t num_frames = ints[5], bins = ints[6];
    const int input_complex = (int)ints[2], has_window = (int)ints[7];
    const int64_t channels = input_complex ? 2 : 1;
    const float *signal = buffers[0], *window = buffers[1];
    float *y = buffers[2];
    double *work = malloc((size_t)(2 * frame_length + 2 * bins + 2) * sizeof(double));
    if (!work) return;
    double *re = work, *im = work + frame_length, *out_re = im + frame_length, *out_im = out_re + bins;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t f = 0; f < num_frames; f++) {
            for (int64_t t = 0; t < frame_length; t++) {
                const float *value = signal + (b * signal_length + f * frame_step + t) * channels;
                const double w = has_window ? window[t] : 1.0;
                re[t] = value[0] * w;
                im[t] = input_complex ? value[1] * w : 0.0;
            }
            naive_dft(re, im, frame_length, frame_length, -1, bins, out_re, out_im);
            float *out = y + ((b * num_frames + f) * bins) * 2;
            for (int64_t k = 0; k < bins; k++) {
                out[2 * k] = (float)out_re[k];
                out[2 * k + 1] = (float)out_im[k];
            }
        }
    free(work);
}

void ortx_fir_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t rows = ints[0] * ints[1], channels = ints[1], input_length = ints[2], taps = ints[3];
    const int64_t output_length = ints[4], pad_begin = ints[5], has_bias = ints[6];
    const float *x = buffers[0], *weight = buffers[1], *bias = buffers[2];
    float *y = buffers[3];
    for (int64_t row = 0; row < rows; row++)
        for (int64_t t = 0; t < output_length; t++) {
            double sum = has_bias ? bias[row % channels] : 0.0;
            for (int64_t k = 0; k < taps; k++) {
                const int64_t index = t - pad_begin + k;
                if (index >= 0 && index < input_length)
                    sum += (double)weight[(row % channels) * taps + k] *
                           x[(ints[8] ? row / channels : row) * input_length + index];
            }
            y[row * output_length + t] = (float)sum;
        }
}
