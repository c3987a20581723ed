/*
 * layercake: layer-wise KV-cache streaming from a prefill instance (P) to a
 * decode instance (D).
 *
 * This is the public header: include it and nothing else. It gathers the
 * headers of the API's areas, each of which includes the ones below it:
 *
 *   layercake/base.h       conventions for every function (read them once),
 *                          export macro, version, error codes, logging,
 *                          tables of configuration knobs and counters
 *   layercake/dataplane.h  context, host memory, regions, grants, tokens,
 *                          completion queues, listeners, connections,
 *                          batches of writes
 *   layercake/engine.h     layouts, step counters, room status, histograms,
 *                          heterogeneous TP fragments, the prefill engine
 *                          (sessions, rooms, batches and chunks, metrics)
 *   layercake/pd.h         prefill/decode over the control plane: bootstrap
 *                          server, prefill ranks and senders, decode ranks
 *                          and receivers
 *   layercake/gpu.h        CUDA as the library finds it at run time
 *                          (dlopen): devices, pointer kinds
 *
 * Not gathered here: layercake/testing.h, the test hooks (simulated device
 * memory, loop-transport faults), which a test includes on purpose.
 *
 * Every function is a real exported symbol (the Python binding loads them
 * with ctypes); the split into files changes no symbol, type or layout.
 */
#ifndef LAYERCAKE_H
#define LAYERCAKE_H

#include "layercake/base.h"
#include "layercake/dataplane.h"
#include "layercake/engine.h"
#include "layercake/pd.h"
#include "layercake/gpu.h"

#endif /* LAYERCAKE_H */
