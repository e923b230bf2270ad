/* The NPU simulator (kernels/npu_sim.c): executes an ortx NPU command stream (docs/npu.md) bit-exactly against
 * two DRAM regions and models its cycles. */
#ifndef ORTX_NPU_SIM_H
#define ORTX_NPU_SIM_H

#include <stdint.h>

/* stats[ORTX_NPU_STATS]: what the run counted. */
enum {
    ORTX_NPU_CYCLES = 0,        /* total: the sum over phases of max(DMA cycles, compute cycles) */
    ORTX_NPU_MACS,              /* issued multiply-accumulates (m * k * p of every MAC_TILE, zero weights too) */
    ORTX_NPU_DMA_BYTES,         /* bytes moved by DMA_IN, DMA_IM2COL and DMA_OUT */
    ORTX_NPU_DMA_CYCLES,        /* sum of DMA command cycles (busy time of the DMA engine) */
    ORTX_NPU_COMPUTE_CYCLES,    /* sum of MAC/REQUANT/VECTOR/POOL cycles (busy time of the compute engine) */
    ORTX_NPU_MAC_CYCLES,        /* MAC_TILE cycles alone */
    ORTX_NPU_PHASES,            /* barrier-delimited phases */
    ORTX_NPU_STATS
};

/* Returns 0, or -1 with a message naming the command index and field in `error` (stats then hold partial counts).
 * timeline (optional, one int64 per command): the cycle at which the phase holding that command ended. */
int ortx_npu_simulate(const uint8_t *stream, int64_t length, const uint8_t *constants, int64_t constant_bytes,
                      uint8_t *work, int64_t work_bytes, int64_t *stats, int64_t *timeline, char *error,
                      int64_t error_bytes);

#endif
