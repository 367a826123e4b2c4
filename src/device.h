/* device.h — which compute device this process uses.
 *
 * device owns the choice between a CPU run and a GPU run (ARCHITECTURE.md §1) and
 * the GPU a task picks from its local rank.  In this version every run is a
 * CPU run; a CUDA-enabled binary probes cudaGetDeviceCount so the log says
 * what it saw, and every run logs the GPU it would have picked. */
#ifndef SR_DEVICE_H
#define SR_DEVICE_H

#include <stddef.h>

/* Picks the CUDA ordinal for a task that sees `n_visible` GPUs, with
 * CUDA_VISIBLE_DEVICES = `visible` (NULL when unset): exactly one visible
 * -> 0 (Slurm's --gpus-per-task=1); at least local_size visible -> the
 * local rank; otherwise -1 with a message naming the variables in `err`.
 * `physical` (may be NULL) receives the entry of CUDA_VISIBLE_DEVICES for
 * the pick ("" when unset). */
int sr_device_pick(const char *visible, int n_visible, int local_rank, int local_size, char *physical,
                   size_t physical_len, char *err, size_t err_len);

/* Number of entries in a CUDA_VISIBLE_DEVICES value (0 for NULL or ""). */
int sr_device_count_visible(const char *visible);

/* Describes the device of this task in `buf`, e.g. "cpu (would pick GPU 1
 * from CUDA_VISIBLE_DEVICES=0,1; built without CUDA)".  Never fails: a CPU
 * run never fails device selection. */
void sr_device_describe(char *buf, size_t n, int local_rank, int local_size);

#endif
