/* cub/device/device_radix_sort.cuh — the emulator's CUB radix sort: what
 * kernels/encoder.cu uses of it, with CUB's documented contract.
 *
 * DoubleBuffer holds two device buffers and a selector; SortKeys with a null
 * d_temp_storage only sets temp_storage_bytes (no work, cudaSuccess);
 * otherwise it sorts the keys of d_keys.Current() by bits [begin_bit,
 * end_bit) ascending, stably, on `stream` in stream order, and on return
 * d_keys.Current() names the buffer that will hold them (both buffers'
 * contents may change).  Temporary storage smaller than asked for, or
 * buffers outside device memory, are cudaErrorInvalidValue, as CUB answers. */
#ifndef CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH
#define CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cudaemu.h"

namespace cub {

template <typename T> struct DoubleBuffer {
    T *d_buffers[2];
    int selector;
    DoubleBuffer() : d_buffers{nullptr, nullptr}, selector(0) {}
    DoubleBuffer(T *current, T *alternate) : d_buffers{current, alternate}, selector(0) {}
    T *Current() { return d_buffers[selector]; }
    T *Alternate() { return d_buffers[selector ^ 1]; }
};

struct DeviceRadixSort {
    template <typename K> struct job {
        K *from, *to;
        size_t n;
        int begin_bit, end_bit;
        static void run(void *arg) {
            job *j = static_cast<job *>(arg);
            K mask = j->end_bit - j->begin_bit >= (int)(8 * sizeof(K)) ? ~(K)0
                                                                          : (((K)1 << (j->end_bit - j->begin_bit)) - 1);
            std::vector<K> v(j->from, j->from + j->n);
            std::stable_sort(v.begin(), v.end(), [&](K a, K b) {
                return ((a >> j->begin_bit) & mask) < ((b >> j->begin_bit) & mask);
            });
            if (j->n)
                memcpy(j->to, v.data(), j->n * sizeof(K));
        }
        static void drop(void *arg) { delete static_cast<job *>(arg); }
    };

    /* Temporary storage the emulated sort asks for: never 0, grows with n
     * (as CUB's tiles do), so a caller that sizes it wrongly is caught. */
    static size_t temp_bytes(size_t n) { return 4096 + 4 * n; }

    template <typename K, typename N>
    static cudaError_t SortKeys(void *d_temp_storage, size_t &temp_storage_bytes, DoubleBuffer<K> &d_keys,
                                N num_items, int begin_bit = 0, int end_bit = sizeof(K) * 8, cudaStream_t stream = 0) {
        size_t n = num_items > 0 ? (size_t)num_items : 0;
        if (!d_temp_storage) {
            temp_storage_bytes = temp_bytes(n);
            return cudaSuccess;
        }
        if (temp_storage_bytes < temp_bytes(n) || !cudaemu_is_device(d_temp_storage, temp_bytes(n)) ||
            begin_bit < 0 || end_bit > (int)(8 * sizeof(K)) || begin_bit >= end_bit ||
            (n && (!cudaemu_is_device(d_keys.Current(), n * sizeof(K)) ||
                   !cudaemu_is_device(d_keys.Alternate(), n * sizeof(K)))))
            return cudaemu_fail(cudaErrorInvalidValue);
        job<K> *j = new job<K>{
            static_cast<K *>(cudaemu_device_view(d_keys.Current(), n * sizeof(K), "cub::DeviceRadixSort::SortKeys")),
            static_cast<K *>(cudaemu_device_view(d_keys.Alternate(), n * sizeof(K), "cub::DeviceRadixSort::SortKeys")),
            n, begin_bit, end_bit};
        cudaemu_count(CUDAEMU_OP_KERNEL); /* (CUB's sort launches several; counted as one call) */
        cudaError_t e = cudaemu_enqueue(stream, &job<K>::run, j, &job<K>::drop);
        if (e != cudaSuccess) {
            delete j;
            return e;
        }
        d_keys.selector ^= 1;
        return cudaSuccess;
    }
};

} // namespace cub

#endif
