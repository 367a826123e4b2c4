/* parity.h — the model, weights and batch of the PyTorch golden test.
 *
 * parity_dump writes them (state.bin); tests/parity/make_golden.py computes
 * loss, logits and gradients with PyTorch in float64 and writes golden.bin
 * (state + results), which is committed; test_parity compares shardrun
 * against it without needing PyTorch.  File layout, little-endian:
 *   char magic[8] = "SRGOLD1\0"
 *   int32 L, NH, C, V, Vp, T, B, seed, n_params
 *   float32 params[n_params]        (unit-major, as model.h's table)
 *   int32 inputs[B*T], targets[B*T]
 * golden.bin continues with
 *   float64 loss
 *   float32 logits[B*T*V]
 *   float32 grads[n_params]         (d mean loss / d params) */
#ifndef SR_PARITY_H
#define SR_PARITY_H

#define PARITY_L 2
#define PARITY_NH 4
#define PARITY_C 32
#define PARITY_V 100
#define PARITY_T 16
#define PARITY_B 3
#define PARITY_SEED 2024

#endif
