/* Reorders between NCHW and the blocked layout (conv.h's NCHWc), for the edges of a run of blocked kernels, and
 * the global average pool of a blocked tensor (a squeeze-and-excitation block's, inside a run).
 *
 * reorder_to_nchwc_f32: ints = [batch, channels, pixels]; buffers = [src (NCHW), dst (blocked)]; pad lanes are
 *   written as zeros.
 * reorder_from_nchwc_f32: the same ints; buffers = [src (blocked), dst (NCHW)].
 * Both are the depthwise conv's own transposes (its ISA table's pack and unpack, 16 lanes: AVX-512's 16x16
 * register transposes, else the portable loops) over chunks of a block's pixels; tasks are (image, block, chunk).
 * Pure data movement: each kernel is its own oracle, and tests check both against numpy.
 * global_avgpool_nchwc_f32: ints = [batch * blocks, pixels]; buffers = [X (blocked), Y (blocked, one pixel)];
 *   per block and lane the sum in pixel order divided by the pixel count; tasks are runs of blocks. Its oracle is
 *   global_avgpool_nchwc_f32_ref (kernels/ref/pool_ref.c).
 */
#include "conv.h"
#include "ortx_kernels.h"
#include "threadpool.h"

/* Pixels per task: 4096 pixels of one block are 256 KB read and written. */
#define REORDER_CHUNK 4096

typedef struct reorder_job {
    const ortx_depthwise_isa *isa;
    int64_t channels, pixels, blocks, chunks;
    const float *src;
    float *dst;
    int to_blocked;
} reorder_job;

static void reorder_task(void *context, int64_t task, int thread) {
    (void)thread;
    const reorder_job *job = context;
    int64_t chunk = task % job->chunks, block = task / job->chunks % job->blocks;
    int64_t n = task / (job->chunks * job->blocks);
    int64_t c0 = block * 16, channels = job->channels - c0 < 16 ? job->channels - c0 : 16;
    int64_t i0 = chunk * REORDER_CHUNK, count = job->pixels - i0 < REORDER_CHUNK ? job->pixels - i0 : REORDER_CHUNK;
    int64_t plain = (n * job->channels + c0) * job->pixels + i0;
    int64_t blocked = ((n * job->blocks + block) * job->pixels + i0) * 16;
    if (job->to_blocked) {
        job->isa->pack(job->src + plain, job->pixels, channels, 1, count, job->dst + blocked, count * 16);
    } else {  /* unpack reads its plane (out_height * out_width) and activation from a conv's parameters */
        ortx_conv_params p = {0};
        p.out_height = 1;
        p.out_width = job->pixels;
        job->isa->unpack(&p, job->src + blocked, count, channels, NULL, job->dst + plain);
    }
}

static void reorder(const int64_t *ints, void *const *buffers, int num_threads, int to_blocked) {
    reorder_job job = {ortx_nchwc_depthwise_isa(), ints[1], ints[2], ortx_nchwc_blocks(ints[1]),
                       (ints[2] + REORDER_CHUNK - 1) / REORDER_CHUNK, buffers[0], buffers[1], to_blocked};
    int64_t tasks = ints[0] * job.blocks * job.chunks;
    ortx_parallel_for(ints[0] * ints[1] * ints[2] < 64 * 1024 ? 1 : num_threads, tasks, reorder_task, &job);
}

void ortx_reorder_to_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    reorder(ints, buffers, num_threads, 1);
}

void ortx_reorder_from_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    reorder(ints, buffers, num_threads, 0);
}

typedef struct global_pool_job {
    const float *x;
    float *y;
    int64_t pixels;
} global_pool_job;

static void global_pool_blocks(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const global_pool_job *job = context;
    for (int64_t block = begin; block < end; block++) {
        const float *x = job->x + block * job->pixels * 16;
        float sum[16] = {0.0f};
        for (int64_t i = 0; i < job->pixels; i++)
            for (int l = 0; l < 16; l++) sum[l] += x[i * 16 + l];
        for (int l = 0; l < 16; l++) job->y[block * 16 + l] = sum[l] / (float)job->pixels;
    }
}

void ortx_global_avgpool_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                   int num_threads) {
    (void)floats;
    global_pool_job job = {buffers[0], buffers[1], ints[1]};
    int threads = ints[0] * ints[1] < 64 * 1024 ? 1 : num_threads;
    ortx_parallel_range(threads, ints[0], (int64_t)ORTX_TASKS_PER_THREAD * threads, global_pool_blocks, &job);
}
