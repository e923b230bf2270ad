/* The step interpreter: runs a compiled segment as a list of kernel calls over one arena.
 *
 * Pointers are resolved once per run (arena base + offset, constant, or external), so a program is read-only and
 * one program serves any number of concurrent runs, each with its own arena.
 */
#include <stdlib.h>
#include <time.h>

#include "ortx_kernels.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ortx_program_run(const ortx_program *p, char *arena, void *const *constants, void *const *externals,
                     int num_threads, int use_ref, double *step_seconds) {
    void *stack_table[256];
    void **table = p->num_buffers <= 256 ? stack_table : malloc(sizeof(void *) * (size_t)p->num_buffers);
    if (!table) return -1;
    for (int32_t b = 0; b < p->num_buffers; b++) {
        int64_t value = p->buffer_values[b];
        switch (p->buffer_kinds[b]) {
            case ORTX_BUFFER_ARENA: table[b] = arena + value; break;
            case ORTX_BUFFER_CONSTANT: table[b] = constants[value]; break;
            default: table[b] = externals[value]; break;
        }
    }
    int count = ortx_kernel_count();
    int status = 0;
    for (int32_t s = 0; s < p->num_steps; s++) {
        int32_t id = p->kernel_ids[s];
        int64_t nbuf = p->buffer_offsets[s + 1] - p->buffer_offsets[s];
        if (id < 0 || id >= count || nbuf > ORTX_MAX_STEP_BUFFERS) { status = -(s + 1); break; }
        const ortx_kernel_entry *entry = ortx_kernel_at(id);
        void *buffers[ORTX_MAX_STEP_BUFFERS];
        for (int64_t i = 0; i < nbuf; i++) buffers[i] = table[p->buffer_ids[p->buffer_offsets[s] + i]];
        ortx_kernel_fn fn = use_ref && entry->ref ? entry->ref : entry->fast;
        double start = step_seconds ? now_seconds() : 0.0;
        fn(p->ints + p->int_offsets[s], p->floats + p->float_offsets[s], buffers, num_threads);
        if (step_seconds) step_seconds[s] = now_seconds() - start;
        if (entry->fallible && nbuf > 0 && ((const ortx_status *)buffers[nbuf - 1])->code != ORTX_STATUS_OK) {
            status = s + 1;
            break;
        }
    }
    if (table != stack_table) free(table);
    return status;
}

ortx_kernel_fn ortx_kernel_function(int index, int use_ref) {
    const ortx_kernel_entry *entry = ortx_kernel_at(index);
    if (!entry) return NULL;
    return use_ref && entry->ref ? entry->ref : entry->fast;
}
