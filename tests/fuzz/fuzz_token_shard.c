/* fuzz_token_shard.c — libFuzzer harness for llm.c token shards (the data
 * files): header, size and every token checked against two vocabularies. */
#include "srconfig.h"

#include <stdint.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int tok_bytes;
    uint64_t ntok;
    if (sr_data_check_shard("fuzz.bin", data, size, 256, &tok_bytes, &ntok) == SR_OK &&
        (tok_bytes != 2 && tok_bytes != 4))
        __builtin_trap();
    sr_data_check_shard("fuzz.bin", data, size, 50257, &tok_bytes, &ntok);
    return 0;
}
