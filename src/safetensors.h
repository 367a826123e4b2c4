/* safetensors.h — the safetensors container: reading and writing its header.
 *
 * safetensors owns the format (huggingface/safetensors, "format" section):
 * an 8-byte little-endian header length N, N bytes of a JSON object (one
 * entry per tensor: {"dtype", "shape", "data_offsets": [begin, end]} with
 * offsets relative to the data area that follows the header, and an
 * optional "__metadata__" object of strings), then the data.  The JSON is
 * parsed by libjansson with duplicate keys refused.  A header is accepted
 * only when it is no larger than SR_ST_MAX_HEADER, every dtype is known,
 * every tensor's byte count is its shape's element count times its dtype
 * size, and the tensors tile the data area exactly (no overlap, no hole,
 * nothing past the end) — what the reference implementation checks; every
 * refusal is SR_ERR_DATA naming the file and the tensor.  Pure: no I/O but
 * sr_st_read_header's two reads. */
#ifndef SR_SAFETENSORS_H
#define SR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define SR_ST_MAX_HEADER 100000000u /* bytes of JSON; the reference reader's limit */
#define SR_ST_MAX_DIMS 8

/* The dtypes of the format, in the spec's spelling. */
typedef enum {
    SR_ST_BOOL,
    SR_ST_U8,
    SR_ST_I8,
    SR_ST_F8_E5M2,
    SR_ST_F8_E4M3,
    SR_ST_I16,
    SR_ST_U16,
    SR_ST_F16,
    SR_ST_BF16,
    SR_ST_I32,
    SR_ST_U32,
    SR_ST_F32,
    SR_ST_F64,
    SR_ST_I64,
    SR_ST_U64,
    SR_ST_NDTYPES
} sr_st_dtype;

typedef struct {
    char *name;
    sr_st_dtype dtype;
    int ndim;
    int64_t shape[SR_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* bytes, relative to the data area */
} sr_st_tensor;

typedef struct {
    uint64_t data_start; /* 8 + N: the data area's offset in the file */
    uint64_t data_len;
    int ntensors;
    sr_st_tensor *t; /* in the header's order */
    char format[16]; /* __metadata__.format ("pt", ...), "" when absent */
} sr_st_header;

size_t sr_st_dtype_size(sr_st_dtype dt);
const char *sr_st_dtype_name(sr_st_dtype dt);

/* Parses and validates a whole file image (header length, header, data)
 * held in memory: the fuzzer's entry point and the tests'.  `path` names
 * the file in messages.  On failure nothing is left to free. */
sr_status sr_st_parse_image(const unsigned char *img, size_t size, const char *path, sr_st_header *out);

/* Reads and parses the header of the open file fd of file_size bytes.
 * SR_ERR_DATA for a malformed header (a length over SR_ST_MAX_HEADER or
 * past the end of the file among them), SR_ERR_NOINPUT when it cannot be
 * read. */
sr_status sr_st_read_header(int fd, uint64_t file_size, const char *path, sr_st_header *out);

void sr_st_free(sr_st_header *h);

/* The tensor called `name`, or NULL. */
const sr_st_tensor *sr_st_find(const sr_st_header *h, const char *name);

/* One tensor of a file to write: name, dtype, shape.  The data follows in
 * the order given, without gaps. */
typedef struct {
    const char *name;
    sr_st_dtype dtype;
    int ndim;
    int64_t shape[SR_ST_MAX_DIMS];
} sr_st_entry;

/* Renders the 8-byte length and the JSON header of a file holding `n`
 * tensors in order, with "__metadata__": {"format": "pt"}, padded with
 * spaces so the data area starts at a multiple of 8.  *out is malloc'd
 * (*len bytes, the data follows).  SR_ERR_INTERNAL when out of memory. */
sr_status sr_st_render_header(const sr_st_entry *e, int n, char **out, size_t *len);

#endif
