/* fuzz_transport.c — libFuzzer harness for the CPU transport's wire: the
 * handshake an acceptor checks (magic, rank, HMAC over the job secret and
 * its nonce) and the frame header every message carries.  The first input
 * byte chooses whether the harness signs the hello correctly for the rank
 * it claims, so the checks behind the MAC are reached, not just HMAC. */
#include "srconfig.h"

#include <stdint.h>
#include <string.h>

#include "comm_tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    static const unsigned char secret[32] = "a secret of 32 bytes for fuzzin";
    static const unsigned char nonce[32] = "the nonce the acceptor sent....";
    int world = 1 + data[1] % 64;
    unsigned char msg[64] = {0};
    size_t len = size - 2 < sizeof msg ? size - 2 : sizeof msg;
    memcpy(msg, data + 2, len);
    if (data[0] & 1)
        sr_tcp_sign_hello(secret, nonce, msg, sizeof msg);
    uint32_t rank = 0;
    sr_tcp_check_hello(secret, nonce, msg, len, world, &rank);
    /* frames: the same bytes as a header, against an expected sequence
     * number and size taken from the input too */
    uint32_t seq = data[0] * 7u;
    uint64_t bytes = data[1] * 4096u;
    char why[256];
    sr_tcp_check_frame(msg, len, seq, bytes, 3, why, sizeof why);
    return 0;
}
