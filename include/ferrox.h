/*
 * ferrox: a large-language-model inference engine.
 *
 * This is the one public header. Handles are opaque; every object has a create/free (or
 * open/free, load/free) pair and fx_*_free(NULL) is a no-op. Functions that can fail return an
 * fx_status and, when the caller passes a struct fx_error, fill it with a message naming what was
 * wrong (and, for parsers, the byte offset where it was found). The library never exits or aborts
 * on bad input.
 *
 * Thread safety is stated per section: immutable objects (an open GGUF file, a loaded model, a
 * vocabulary) may be shared by any number of threads; mutable ones (a context, a writer) belong
 * to one thread at a time.
 */
#ifndef FERROX_H
#define FERROX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FX_VERSION "0.1.0"

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

typedef enum fx_status {
    FX_OK = 0,
    FX_ERR_NOMEM,       /* an allocation failed */
    FX_ERR_IO,          /* a file or socket operation failed */
    FX_ERR_FORMAT,      /* input data is malformed (a GGUF file, a request, ...) */
    FX_ERR_UNSUPPORTED, /* valid input that ferrox does not handle (an architecture, a type) */
    FX_ERR_INVALID_ARG, /* a caller passed a bad argument or flag */
    FX_ERR_CAPACITY,    /* a fixed capacity would be exceeded (context, KV blocks) */
    FX_ERR_CANCELLED,   /* the operation was cancelled by the caller */
    FX_ERR_NOT_FOUND,   /* a named thing (key, tensor, file) does not exist */
} fx_status;

/* Filled by a failing call when the caller passes one. `offset` is the byte offset in the input
 * where a parser found the problem, or UINT64_MAX when no offset applies. */
struct fx_error {
    fx_status code;
    char msg[256];
    uint64_t offset;
};

#define FX_NO_OFFSET UINT64_MAX

/* A token id: an index into a model's vocabulary. */
typedef int32_t fx_token;

/* A short constant name for a status ("FX_ERR_FORMAT"); never NULL. */
const char *fx_status_name(fx_status s);

/* The library version, FX_VERSION. */
const char *fx_version(void);

/* ---------------------------------------------------------------------------------------------
 * Tensor element types: the ggml type ids used in GGUF files.
 * Every id that GGUF defines is listed so that a reader can size and report any file; the
 * kernels compute with the subset documented in src/kernels/types.h.
 * ------------------------------------------------------------------------------------------- */

enum fx_type {
    FX_TYPE_F32 = 0,
    FX_TYPE_F16 = 1,
    FX_TYPE_Q4_0 = 2,
    FX_TYPE_Q4_1 = 3,
    FX_TYPE_Q5_0 = 6,
    FX_TYPE_Q5_1 = 7,
    FX_TYPE_Q8_0 = 8,
    FX_TYPE_Q8_1 = 9,
    FX_TYPE_Q2_K = 10,
    FX_TYPE_Q3_K = 11,
    FX_TYPE_Q4_K = 12,
    FX_TYPE_Q5_K = 13,
    FX_TYPE_Q6_K = 14,
    FX_TYPE_Q8_K = 15,
    FX_TYPE_IQ2_XXS = 16,
    FX_TYPE_IQ2_XS = 17,
    FX_TYPE_IQ3_XXS = 18,
    FX_TYPE_IQ1_S = 19,
    FX_TYPE_IQ4_NL = 20,
    FX_TYPE_IQ3_S = 21,
    FX_TYPE_IQ2_S = 22,
    FX_TYPE_IQ4_XS = 23,
    FX_TYPE_I8 = 24,
    FX_TYPE_I16 = 25,
    FX_TYPE_I32 = 26,
    FX_TYPE_I64 = 27,
    FX_TYPE_F64 = 28,
    FX_TYPE_IQ1_M = 29,
    FX_TYPE_BF16 = 30,
    FX_TYPE_TQ1_0 = 34,
    FX_TYPE_TQ2_0 = 35,
    FX_TYPE_MXFP4 = 39,
    FX_TYPE_COUNT = 40 /* one past the largest id; not every id below it is a type */
};

/* True when `type` is an id listed above. */
bool fx_type_is_valid(uint32_t type);
/* "Q4_K", or "?" for an invalid id. */
const char *fx_type_name(enum fx_type type);
/* Parses a type name ("q4_k" or "Q4_K"); false when unknown. */
bool fx_type_from_name(const char *name, enum fx_type *out);
/* Elements per block (1 for plain types, 32 or 256 for quantized ones); 0 for an invalid id. */
int64_t fx_type_block_elems(enum fx_type type);
/* Bytes per block; 0 for an invalid id. */
int64_t fx_type_block_bytes(enum fx_type type);
/* Bytes of a row of n elements. Fails (returns false) when n is not a whole number of blocks or
 * the size overflows. */
bool fx_type_row_bytes(enum fx_type type, int64_t n, uint64_t *out);

/* ---------------------------------------------------------------------------------------------
 * GGUF files
 *
 * fx_gguf_open maps a file read-only and validates all of it (header, every metadata value,
 * every tensor info, tensor data bounds, alignment, overlaps) before returning. What it hands out
 * afterwards is only views into validated data: keys and string values are NUL-terminated copies,
 * numeric arrays are aligned copies, tensor data points into the mapping. An open file is
 * immutable and may be read from any number of threads. Every pointer it returns lives until
 * fx_gguf_free.
 * ------------------------------------------------------------------------------------------- */

enum fx_gguf_type {
    FX_GGUF_UINT8 = 0,
    FX_GGUF_INT8 = 1,
    FX_GGUF_UINT16 = 2,
    FX_GGUF_INT16 = 3,
    FX_GGUF_UINT32 = 4,
    FX_GGUF_INT32 = 5,
    FX_GGUF_FLOAT32 = 6,
    FX_GGUF_BOOL = 7,
    FX_GGUF_STRING = 8,
    FX_GGUF_ARRAY = 9,
    FX_GGUF_UINT64 = 10,
    FX_GGUF_INT64 = 11,
    FX_GGUF_FLOAT64 = 12,
    FX_GGUF_TYPE_COUNT = 13
};

/* "uint32", "string", "array", ...; "?" for an unknown id. */
const char *fx_gguf_type_name(enum fx_gguf_type type);

/* A string from a GGUF file. `data` is NUL-terminated, but GGUF strings may themselves contain
 * NUL bytes, so `len` is authoritative. */
struct fx_gguf_str {
    const char *data;
    uint64_t len;
};

/* One metadata key/value pair. For FX_GGUF_ARRAY, `arr_type` is the element type, `arr_n` the
 * element count, and `v.arr` points at arr_n elements of that type stored natively (for strings:
 * an array of struct fx_gguf_str; for bools: one byte each, 0 or 1). For other types arr_type
 * and arr_n are 0. Arrays of arrays are rejected (FX_ERR_UNSUPPORTED). */
struct fx_gguf_kv {
    const char *key;
    enum fx_gguf_type type;
    enum fx_gguf_type arr_type;
    uint64_t arr_n;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
        bool b;
        struct fx_gguf_str str;
        const void *arr;
    } v;
};

#define FX_GGUF_MAX_DIMS 4
/* general.alignment when a file does not set it. */
#define FX_GGUF_DEFAULT_ALIGNMENT 32
/* Longest key (the GGUF specification's limit) and longest tensor name (ggml's: 64 bytes with
 * the NUL); the reader rejects longer ones and the writer refuses them. */
#define FX_GGUF_MAX_KEY_LEN  65535
#define FX_GGUF_MAX_NAME_LEN 63

/* A validated view of one tensor: n_elements and n_bytes are consistent with type and ne, and
 * the data lies inside the file's data section. ne[0] is the row length (the innermost, fastest
 * dimension); unused dimensions are 1. */
struct fx_tensor_view {
    const char *name;
    enum fx_type type;
    uint32_t n_dims;
    int64_t ne[FX_GGUF_MAX_DIMS];
    int64_t n_elements;
    uint64_t n_bytes;
    uint64_t offset; /* from the start of the data section */
    const void *data;
};

struct fx_gguf;

/* Opens and validates a GGUF file. On failure *out is NULL and err says what was wrong. */
fx_status fx_gguf_open(const char *path, struct fx_gguf **out, struct fx_error *err);
/* The same over a caller's buffer, which must outlive the returned object (tests, fuzzing). */
fx_status fx_gguf_open_memory(const void *data, size_t size, struct fx_gguf **out,
                              struct fx_error *err);
void fx_gguf_free(struct fx_gguf *g);

uint32_t fx_gguf_version(const struct fx_gguf *g);
uint64_t fx_gguf_alignment(const struct fx_gguf *g);
uint64_t fx_gguf_data_offset(const struct fx_gguf *g); /* file offset of the data section */
uint64_t fx_gguf_file_size(const struct fx_gguf *g);

int64_t fx_gguf_n_kv(const struct fx_gguf *g);
/* The i-th pair in file order (0 <= i < n_kv). */
const struct fx_gguf_kv *fx_gguf_kv_at(const struct fx_gguf *g, int64_t i);
/* Lookup by key, O(1) expected; NULL when absent. */
const struct fx_gguf_kv *fx_gguf_find_kv(const struct fx_gguf *g, const char *key);

/* Typed getters. Each returns FX_ERR_NOT_FOUND when the key is absent and FX_ERR_FORMAT (message
 * naming the key, the expected and the found type) when the value has another type or does not
 * fit. Integer getters accept any integer type whose value fits the result. */
fx_status fx_gguf_get_u32(const struct fx_gguf *g, const char *key, uint32_t *out,
                          struct fx_error *err);
fx_status fx_gguf_get_u64(const struct fx_gguf *g, const char *key, uint64_t *out,
                          struct fx_error *err);
fx_status fx_gguf_get_i32(const struct fx_gguf *g, const char *key, int32_t *out,
                          struct fx_error *err);
fx_status fx_gguf_get_i64(const struct fx_gguf *g, const char *key, int64_t *out,
                          struct fx_error *err);
fx_status fx_gguf_get_f32(const struct fx_gguf *g, const char *key, float *out,
                          struct fx_error *err); /* accepts float32 and float64 */
fx_status fx_gguf_get_bool(const struct fx_gguf *g, const char *key, bool *out,
                           struct fx_error *err);
fx_status fx_gguf_get_str(const struct fx_gguf *g, const char *key, struct fx_gguf_str *out,
                          struct fx_error *err);
/* An array whose elements have type `elem` (FX_GGUF_STRING: *data is a const struct
 * fx_gguf_str *); *data points at *n native elements. An array of another element type is
 * FX_ERR_FORMAT, so a caller never reads 4-byte elements from a 1-byte array. */
fx_status fx_gguf_get_arr(const struct fx_gguf *g, const char *key, enum fx_gguf_type elem,
                          const void **data, uint64_t *n, struct fx_error *err);

int64_t fx_gguf_n_tensors(const struct fx_gguf *g);
/* The i-th tensor in file order (0 <= i < n_tensors). */
const struct fx_tensor_view *fx_gguf_tensor_at(const struct fx_gguf *g, int64_t i);
/* Lookup by name, O(1) expected; NULL when absent. */
const struct fx_tensor_view *fx_gguf_find_tensor(const struct fx_gguf *g, const char *name);

/* A hint that bytes [data, data + size) of the file will not be read for a while (a loader that
 * copied them elsewhere): a mapped file drops those pages from memory, to be read back from the
 * file if they are touched again; a buffer given to fx_gguf_open_memory is left alone. */
void fx_gguf_release(const struct fx_gguf *g, const void *data, uint64_t size);

/* ---------------------------------------------------------------------------------------------
 * GGUF writer
 *
 * Collects metadata and tensor descriptions, then writes a standard GGUF v3 file (to a temporary
 * name, renamed into place once complete, so a failed write never leaves a truncated file under
 * the final name). Tensor data is either borrowed from the caller (it must stay valid until the
 * write) or produced during the write by a fill callback, so files larger than memory can be
 * written. A writer belongs to one thread.
 * ------------------------------------------------------------------------------------------- */

struct fx_gguf_writer;

/* Produces the bytes [offset, offset + size) of tensor `index` (in the order tensors were added)
 * into dst. The writer calls it in order, chunk after chunk, each chunk a whole number of rows
 * (ne[0] elements) and offsets increasing from 0 to the tensor's byte size, so a tensor larger
 * than memory is generated piece by piece into a bounded buffer. */
typedef fx_status (*fx_gguf_fill_fn)(void *user, int64_t index, uint64_t offset, void *dst,
                                     uint64_t size, struct fx_error *err);

fx_status fx_gguf_writer_create(struct fx_gguf_writer **out, struct fx_error *err);
void fx_gguf_writer_free(struct fx_gguf_writer *w);

/* Sets general.alignment (a power of two, at most 1 MiB) used to place tensor data, and the
 * general.alignment key with it; the default, without the key, is 32. Setting the key with
 * fx_gguf_writer_set_kv does the same (it must be a uint32), and removing it restores 32. */
fx_status fx_gguf_writer_set_alignment(struct fx_gguf_writer *w, uint32_t alignment,
                                       struct fx_error *err);

/* Adds (or replaces) one key/value pair; every value, string and array is copied. */
fx_status fx_gguf_writer_set_kv(struct fx_gguf_writer *w, const struct fx_gguf_kv *kv,
                                struct fx_error *err);
fx_status fx_gguf_writer_set_u32(struct fx_gguf_writer *w, const char *key, uint32_t v,
                                 struct fx_error *err);
fx_status fx_gguf_writer_set_i32(struct fx_gguf_writer *w, const char *key, int32_t v,
                                 struct fx_error *err);
fx_status fx_gguf_writer_set_u64(struct fx_gguf_writer *w, const char *key, uint64_t v,
                                 struct fx_error *err);
fx_status fx_gguf_writer_set_f32(struct fx_gguf_writer *w, const char *key, float v,
                                 struct fx_error *err);
fx_status fx_gguf_writer_set_bool(struct fx_gguf_writer *w, const char *key, bool v,
                                  struct fx_error *err);
fx_status fx_gguf_writer_set_str(struct fx_gguf_writer *w, const char *key, const char *v,
                                 struct fx_error *err);
/* A numeric or bool array of n native elements of type `elem`. */
fx_status fx_gguf_writer_set_arr(struct fx_gguf_writer *w, const char *key, enum fx_gguf_type elem,
                                 const void *data, uint64_t n, struct fx_error *err);
/* An array of n NUL-terminated strings. */
fx_status fx_gguf_writer_set_str_arr(struct fx_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n, struct fx_error *err);
/* Removes a key if present. */
void fx_gguf_writer_remove_kv(struct fx_gguf_writer *w, const char *key);

/* Adds a tensor of n_dims (0 to 4) dimensions ne[0..n_dims-1], each at least 1, ne[0] a whole
 * number of the type's blocks. `data` (the tensor's byte size) is borrowed until the write; pass
 * NULL to have the writer call the fill callback for it instead. Names must be unique, at most
 * FX_GGUF_MAX_NAME_LEN bytes. Tensors are laid out in the order added. */
fx_status fx_gguf_writer_add_tensor(struct fx_gguf_writer *w, const char *name, enum fx_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    struct fx_error *err);

/* Writes the file (GGUF v3: pairs in the order first set, tensor infos and data in the order
 * added, every tensor's data padded to the alignment). `fill` may be NULL when every tensor was
 * given data. The writer can write again afterwards. */
fx_status fx_gguf_writer_write(struct fx_gguf_writer *w, const char *path, fx_gguf_fill_fn fill,
                               void *user, struct fx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Models
 *
 * A model is the immutable description and weights of one GGUF file: architecture, hyper-
 * parameters, and weight views into the file's read-only mapping. Supported architectures:
 * llama (Llama 1-3, Mistral, TinyLlama, SmolLM2, Mixtral-style experts), qwen2, qwen3, qwen3moe,
 * gemma2, gemma3, gpt-oss. A loaded model may be shared by any number of contexts and threads;
 * free it only after every context using it.
 * ------------------------------------------------------------------------------------------- */

struct fx_model;

/* Progress of a long operation: fraction in [0, 1], non-decreasing, the last call with 1.
 * Returning false cancels the operation (it fails with FX_ERR_CANCELLED). */
typedef bool (*fx_progress_fn)(float fraction, void *user);

/* The deepest fx_model_params.moe_lookahead. */
#define FX_MOE_LOOKAHEAD_MAX 4

/* Eviction policies of the expert cache (fx_model_params.moe_evict). */
enum fx_moe_evict {
    FX_MOE_EVICT_QUOTA, /* each layer keeps its share of the slots, LRU inside */
    FX_MOE_EVICT_LRU,   /* the least recently used expert of any layer */
    FX_MOE_EVICT_LFU,   /* the default: the expert used least often, its count of uses halved
                         * every 32 steps (recent use weighs more), LRU among equals */
};

/* Start from fx_model_default_params(). */
struct fx_model_params {
    /* NULL (the default): the weights are read from the mapped file when first used. Otherwise
     * fx_model_load reads every page of tensor data once before returning (so that the first
     * forward pass does not stall on page faults) and reports the fraction read, from the
     * loading thread; a terminal can show a progress bar for a large file. */
    fx_progress_fn progress;
    void *progress_user;
    /* 0 (the default): every weight is resident. Otherwise, for a mixture-of-experts model, the
     * size in bytes of a cache that holds the experts' matrices: they are read from the file (by
     * fx_model_load only, which knows its path) when a step needs them or read-ahead
     * predicts them, and every other weight stays resident. Output is identical either way. The
     * smallest size holds one expert (its gate, up and down matrices); a smaller one is refused
     * with an error naming that minimum. Ignored for dense models. */
    uint64_t moe_cache_bytes;
    /* With moe_cache_bytes: how many layers ahead the read-ahead predicts (layer L + N's router
     * on layer L's input), 0 to FX_MOE_LOOKAHEAD_MAX; 0 reads only on demand. The default, 1,
     * missed least in docs/MOE_STREAMING.md's measurements. */
    int32_t moe_lookahead;
    /* With moe_cache_bytes: which cached expert a full cache gives up (docs/MOE_STREAMING.md
     * compares them). */
    enum fx_moe_evict moe_evict;
};

struct fx_model_params fx_model_default_params(void);

/* Loads a model file. Missing or mis-shaped tensors and absurd hyper-parameters are errors naming
 * the tensor or key with the expected and the found value. `params` may be NULL. */
fx_status fx_model_load(const char *path, const struct fx_model_params *params,
                        struct fx_model **out, struct fx_error *err);
/* The same from an already open file; on success the model owns `g` and frees it. */
fx_status fx_model_load_gguf(struct fx_gguf *g, const struct fx_model_params *params,
                             struct fx_model **out, struct fx_error *err);
void fx_model_free(struct fx_model *m);

const char *fx_model_arch(const struct fx_model *m); /* "llama", "qwen3", ... */
int32_t fx_model_n_vocab(const struct fx_model *m);
int32_t fx_model_n_embd(const struct fx_model *m);
int32_t fx_model_n_layer(const struct fx_model *m);
/* Multi-token-prediction blocks the model carries (0 for most). */
int32_t fx_model_n_nextn(const struct fx_model *m);
/* Whether a sequence of this model carries a recurrent state beside its KV rows (Qwen3.5's
 * Gated DeltaNet layers). Such a sequence cannot be truncated, only kept whole or cleared, so
 * what rolls a sequence back (speculation, a prefix shared with an earlier prompt) must start
 * it again instead; ferrox does not yet pool, save or speculate on such sequences. */
bool fx_model_has_recurrent_state(const struct fx_model *m);
int32_t fx_model_n_ctx_train(const struct fx_model *m);
uint64_t fx_model_n_params(const struct fx_model *m); /* elements of every tensor */
uint64_t fx_model_size(const struct fx_model *m);     /* bytes of every tensor */
/* The open file the model was loaded from (its metadata, e.g. for the tokenizer). */
const struct fx_gguf *fx_model_gguf(const struct fx_model *m);

/* What the expert cache (fx_model_params.moe_cache_bytes) has done since the model was loaded;
 * all counters grow only, so a caller reports a step as the difference of two copies. */
struct fx_moe_stats {
    uint64_t cache_bytes;       /* the cache's size; 0 when the experts are resident */
    int32_t n_slots;            /* experts it holds at once */
    uint64_t layer_steps;       /* MoE layers run (each layer of each forward chunk) */
    uint64_t streamed_layers;   /* of those, layers whose experts did not fit at once */
    uint64_t experts_used;      /* experts those layers used (each once per layer step) */
    uint64_t misses;            /* of those, read when needed (neither cached nor read ahead) */
    uint64_t prefetches;        /* experts read ahead by the I/O threads */
    uint64_t bytes_read;        /* bytes read from the file, on demand and ahead */
    uint64_t lookahead_checked; /* used experts of layers that had a prediction */
    uint64_t lookahead_hits;    /* of those, experts the prediction named */
    uint64_t io_ns;             /* time spent reading and packing, summed over readers */
    uint64_t wait_ns;           /* time the forward passes waited for experts */
};
/* Thread-safe; all zero for a model whose experts are resident. */
void fx_model_moe_stats(const struct fx_model *m, struct fx_moe_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Contexts and forward passes
 *
 * A context runs one model: it owns a worker pool, a contiguous KV cache of n_ctx positions for
 * one sequence (keys and values as f32, f16 or q8_0 rows), and every scratch buffer a forward
 * pass needs, all allocated at creation (no allocation per token). It borrows the model, which
 * must outlive it. A context belongs to one thread at a time; several contexts may share one
 * model. The same context also runs steps over a paged KV pool (below), for many sequences.
 *
 * Forward calls evaluate tokens at consecutive positions pos0, pos0 + 1, ... of the sequence;
 * pos0 may be at most the number of positions already in the cache (fx_context_kv_len), and
 * evaluating at pos0 drops whatever the cache held from pos0 on. Each call enters the worker
 * pool once. Every argument is checked before anything is written: a bad token, a position past
 * the cache or a call that would overflow the context returns an error and leaves the context
 * as it was.
 * ------------------------------------------------------------------------------------------- */

struct fx_context;

struct fx_context_params {
    int32_t n_ctx;     /* positions in the KV cache; 0: the training context, at most 4096 */
    int32_t n_batch;   /* rows evaluated together (longer calls run in chunks); 0: 512 */
    int32_t n_threads; /* workers; 0: one per CPU this process may use */
    /* Element types of the contiguous cache's keys and values (llama.cpp's -ctk / -ctv):
     * FX_TYPE_F32 (a zeroed struct's), FX_TYPE_F16 or FX_TYPE_Q8_0 (head sizes a multiple of
     * 32). fx_context_default_params() gives the measured default (README). */
    enum fx_type type_k, type_v;
    /* true: no contiguous cache is allocated; the context only runs steps over paged pools, and
     * n_ctx bounds the positions those steps may use. */
    bool paged_only;
    /* Layers on the GPU (llama.cpp's -ngl): the last n_gpu_layers of the model (every layer
     * when it is at least the layer count, as -ngl 99), with the output; 0 (the default): none.
     * Only a build with the CUDA backend (make CUDA=1) has GPU layers, for now for dense
     * llama-family models over an f32 or f16 cache: the context's one-token calls over its
     * cache then run the first layers on the CPU and the rest on the device, every other call
     * on the CPU. Anything else is refused by fx_context_create with FX_ERR_UNSUPPORTED saying
     * why. */
    int32_t n_gpu_layers;
};

struct fx_context_params fx_context_default_params(void);
fx_status fx_context_create(const struct fx_model *m, const struct fx_context_params *params,
                            struct fx_context **out, struct fx_error *err);
void fx_context_free(struct fx_context *ctx);

const struct fx_model *fx_context_model(const struct fx_context *ctx);
int32_t fx_context_n_ctx(const struct fx_context *ctx);
/* Positions currently held by the KV cache. */
int32_t fx_context_kv_len(const struct fx_context *ctx);
/* Keeps the first n positions of the cache (n <= fx_context_kv_len); 0 clears it. A sequence with
 * a recurrent state (fx_model_has_recurrent_state) is kept whole or cleared, except right after
 * fx_forward_verify, whose rows it may be cut back into. */
fx_status fx_context_kv_truncate(struct fx_context *ctx, int32_t n, struct fx_error *err);

/* The most rows a verify step of a hybrid model can roll back: fx_forward_verify keeps one
 * snapshot of the recurrent state per row but the last, so a context holds at most this many
 * snapshots (FX_ROLLBACK_MAX times the recurrent state, allocated by the first verify step); so
 * does each sequence of a pool (fx_batch.snapshot). */
#define FX_ROLLBACK_MAX 16

/* One token at position pos; logits: [n_vocab]. */
fx_status fx_forward_token(struct fx_context *ctx, fx_token token, int32_t pos, float *logits,
                           struct fx_error *err);
/* n tokens at pos0..pos0+n-1, causal; logits: [n][n_vocab], one row per token. */
fx_status fx_forward_batch(struct fx_context *ctx, const fx_token *tokens, int32_t n, int32_t pos0,
                           float *logits, struct fx_error *err);
/* A verify step (speculative decoding): fx_forward_batch that, for a model with a recurrent
 * state, also keeps the state after each row but the last (n - 1 <= FX_ROLLBACK_MAX), so that
 * fx_context_kv_truncate may then cut the sequence to any length pos0 + 1 .. pos0 + n, until
 * the next forward call or a truncation that cuts. The same bits as fx_forward_batch otherwise; a
 * plain call keeps no snapshot. */
fx_status fx_forward_verify(struct fx_context *ctx, const fx_token *tokens, int32_t n, int32_t pos0,
                            float *logits, struct fx_error *err);
/* The same, plus the final normed hidden state of every row; hidden: [n][n_embd]. */
fx_status fx_forward_batch_with_hidden(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                       int32_t pos0, float *logits, float *hidden,
                                       struct fx_error *err);
/* Prefill: the same evaluation, logits of the last token only; logits: [n_vocab]. */
fx_status fx_forward_batch_last(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                int32_t pos0, float *logits, struct fx_error *err);
/* Final normed hidden states only (embeddings); hidden: [n][n_embd]. */
fx_status fx_forward_hidden_batch(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                  int32_t pos0, float *hidden, struct fx_error *err);
/* The multi-token-prediction head of a model that has one (fx_model_n_nextn > 0; Qwen3.5's
 * NextN block), as llama.cpp forms it: n rows at positions pos0..pos0+n-1 of the context's MTP
 * cache, a cache of its own beside the trunk's (pos0 <= fx_context_mtp_len; rows after pos0 are
 * dropped). Row i reads token tokens[i] and hidden_in[i] ([n][n_embd]): the trunk's final normed
 * hidden state (fx_forward_batch_with_hidden) of the position before the token's, zeros before
 * the first, or the head's own hidden_out of the previous draft. logits: [n][n_vocab], the
 * prediction of the token after tokens[i]; hidden_out: [n][n_embd] or NULL. */
fx_status fx_forward_mtp(struct fx_context *ctx, const fx_token *tokens, const float *hidden_in,
                         int32_t n, int32_t pos0, float *logits, float *hidden_out,
                         struct fx_error *err);
/* Positions currently held by the context's MTP cache. */
int32_t fx_context_mtp_len(const struct fx_context *ctx);
/* Keeps the first n positions of the MTP cache (n <= fx_context_mtp_len): after a verify step,
 * the rows that read rejected drafts. The trunk's cache is not touched. */
fx_status fx_context_mtp_truncate(struct fx_context *ctx, int32_t n, struct fx_error *err);

/* The outputs of fx_forward_verify_mtp, for a call of n rows. */
struct fx_verify_mtp_out {
    float *logits;     /* [n][n_vocab] the trunk's, as fx_forward_verify's */
    float *hidden;     /* [n][n_embd] the trunk's final normed hidden states */
    fx_token *argmax;  /* [n] the trunk's greedy token of each row (the largest logit, ties to
                        * the lowest id): the token the head's row reads */
    float *mtp_logits; /* [n][n_vocab] row i: the head's prediction of the token after argmax[i] */
    float *mtp_hidden; /* [n][n_embd] the head's hidden output (to chain drafts on), or NULL */
};
/* A verify step with the MTP head folded in (speculative decoding with the model's own head):
 * fx_forward_verify over n rows at pos0..pos0+n-1 (the same bits, the same snapshots), then, in
 * the same entry of the worker pool, the head over n rows at MTP positions pos0+1..pos0+n, row i
 * reading (argmax[i], hidden[i]): the trunk's own greedy token for the position after row i and
 * row i's hidden state, the pairing fx_forward_mtp documents. When the token kept after row i is
 * argmax[i] (always at temperature 0), mtp_logits row i is the head's draft for the position
 * after it, with no further pass; rows after the last one kept read rejected drafts and are cut
 * with fx_context_mtp_truncate, and a row whose kept token differs from argmax[i] is computed
 * again with fx_forward_mtp. The MTP cache must hold position pos0 (fx_context_mtp_len >= pos0 +
 * 1; rows after it are dropped), and pos0 + n < n_ctx. Afterwards the trunk's cache holds pos0 + n
 * positions and the MTP cache pos0 + n + 1. */
fx_status fx_forward_verify_mtp(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                int32_t pos0, const struct fx_verify_mtp_out *out,
                                struct fx_error *err);
/* A prompt (or the rest of one) with the MTP head caught up in the same pool entry: the trunk
 * as fx_forward_batch_last (logits [n_vocab] of the last row, the same bits), keeping its final
 * normed hidden rows, then the head over the same n tokens at MTP positions pos0..pos0+n-1, row
 * i reading tokens[i] and the trunk's hidden row of the position before. hidden: [n + 1][n_embd];
 * row 0 is read: the trunk's hidden row of position pos0 - 1 (zeros at pos0 0, or when not
 * known); rows 1..n receive this call's rows. The head's logits are not computed (the next draft
 * needs the token after the prompt, which the prompt's logits have yet to give). The MTP cache
 * must hold pos0 positions (rows after them are dropped); afterwards it holds pos0 + n. */
fx_status fx_forward_prefill_mtp(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                 int32_t pos0, float *logits, float *hidden, struct fx_error *err);

/* Saved state (llama.cpp's --prompt-cache and slot save): the keys and values of a sequence's
 * first n positions and their token ids in one file, with the identity of the model they were
 * computed by (architecture, sizes, and a fingerprint of its hyper-parameters and tensors), their
 * KV types and a CRC-64 of the whole file. The format is the same for a context and a pool (see
 * fx_kv_seq_save): a state saved from either loads into the other.
 *
 * A load reads and validates the whole file before it changes anything, so a damaged, truncated
 * or foreign file is refused and the context is left as it was: FX_ERR_FORMAT for a file that is
 * not an intact state file (bad magic or version, a size that disagrees with its header, a
 * checksum mismatch), FX_ERR_INVALID_ARG for one of another model or KV type (the message names
 * the field that differs: "state file is for another model (architecture qwen3, this model is
 * llama)"), FX_ERR_CAPACITY for more positions than the context holds, FX_ERR_NOT_FOUND /
 * FX_ERR_IO when it cannot be read. Each call allocates only for its own duration. */

/* Writes positions 0..n-1 of ctx's cache (n <= fx_context_kv_len) with their token ids
 * tokens[0..n) to path, through a temporary file in the same directory that is renamed into
 * place once complete and synced: a failed save never leaves a partial file under path. ctx is
 * not changed. */
fx_status fx_context_state_save(const struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                const char *path, struct fx_error *err);
/* Loads from path the positions the file shares with prompt[0..n_prompt) (the longest common
 * prefix of the file's tokens and the prompt, and at most n_prompt - 1 positions, so that the
 * caller still evaluates the prompt's last token and gets its logits). On success the cache holds
 * exactly those positions (fx_context_kv_len == *n_loaded, possibly 0) and the caller continues
 * with prompt[*n_loaded..] at position *n_loaded. On failure nothing changes. */
fx_status fx_context_state_load(struct fx_context *ctx, const char *path, const fx_token *prompt,
                                int32_t n_prompt, int32_t *n_loaded, struct fx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Paged KV: many sequences in one pool of blocks
 *
 * A pool holds n_blocks blocks of block_size positions (every layer's keys and values of those
 * positions). Each live sequence has a block table; sequences forked from one another share
 * blocks (reference counted) until one of them writes into a shared block, which is copied
 * first. Full blocks are also kept in a prefix cache keyed by the token ids of every position up
 * to their end, so that a new sequence with the same prompt prefix shares them instead of
 * computing them again; blocks no sequence holds stay cached until the pool needs them, then the
 * least recently used go first.
 *
 * Steps over a pool (fx_forward_*_paged, fx_forward_multi_seq) append rows at the end of their
 * sequences: a row's position must be its sequence's length (after the step's earlier rows of
 * that sequence). Each step reserves the blocks of all its rows before it writes anything: when
 * they do not fit it returns FX_ERR_CAPACITY and every sequence and block is as it was. A
 * sequence's logits are bit-identical whatever else runs in the same step, however its prompt
 * was chunked, and to the same tokens through a contiguous cache of the same KV types.
 *
 * A pool borrows the model and belongs to one thread at a time (with the context that steps
 * it); fx_seq_id values are small integers, reused after fx_kv_seq_free.
 * ------------------------------------------------------------------------------------------- */

struct fx_kv_pool;
typedef int32_t fx_seq_id;

struct fx_kv_pool_params {
    int32_t n_blocks;            /* blocks in the pool (>= 1) */
    int32_t block_size;          /* positions per block; 0: 16 */
    int32_t n_seq_max;           /* live sequences at once; 0: 256 */
    enum fx_type type_k, type_v; /* FX_TYPE_F32, FX_TYPE_F16 or FX_TYPE_Q8_0 */
};

struct fx_kv_pool_params fx_kv_pool_default_params(void);
fx_status fx_kv_pool_create(const struct fx_model *m, const struct fx_kv_pool_params *params,
                            struct fx_kv_pool **out, struct fx_error *err);
void fx_kv_pool_free(struct fx_kv_pool *pool);
/* Bytes of key and value memory the pool holds: what llama.cpp's cache of n_blocks * block_size
 * positions of the same types holds, to the byte, when block_size is a multiple of 16 (keys are
 * kept in tiles of 16 positions, and a block of another size pads its last one). */
uint64_t fx_kv_pool_bytes(const struct fx_kv_pool *pool);

/* A new, empty sequence. FX_ERR_CAPACITY when n_seq_max sequences are alive. */
fx_status fx_kv_seq_create(struct fx_kv_pool *pool, fx_seq_id *out, struct fx_error *err);
/* A new sequence holding the longest prefix of tokens[0..n) that the prefix cache has, in whole
 * blocks and at most n - 1 tokens (the last token is always left to compute, so that the caller
 * gets its logits); *n_cached is its length. The other tokens are appended by forward steps. */
fx_status fx_kv_seq_create_cached(struct fx_kv_pool *pool, const fx_token *tokens, int32_t n,
                                  fx_seq_id *out, int32_t *n_cached, struct fx_error *err);
/* A new sequence sharing every block of src (parallel sampling: n > 1 choices of one prompt). */
fx_status fx_kv_seq_fork(struct fx_kv_pool *pool, fx_seq_id src, fx_seq_id *out,
                         struct fx_error *err);
/* Keeps the first n positions of seq (rollback of rejected rows); blocks past them are
 * released. A sequence with a recurrent state is kept whole or cleared, or cut back to a row
 * whose state its last step kept (fx_batch.snapshot). */
fx_status fx_kv_seq_truncate(struct fx_kv_pool *pool, fx_seq_id seq, int32_t n,
                             struct fx_error *err);
/* Releases seq's blocks (its full blocks stay in the prefix cache); a no-op for an id that is
 * not alive. */
void fx_kv_seq_free(struct fx_kv_pool *pool, fx_seq_id seq);
/* Positions held by seq, or -1 when it is not alive. */
int32_t fx_kv_seq_len(const struct fx_kv_pool *pool, fx_seq_id seq);
/* The token ids of seq's positions (fx_kv_seq_len of them), valid until seq next changes. */
const fx_token *fx_kv_seq_tokens(const struct fx_kv_pool *pool, fx_seq_id seq);

/* Whether n more rows of a sequence fit: now, later (blocks are held by other sequences), or
 * never (more blocks than the whole pool). */
enum fx_kv_admit { FX_KV_ADMIT_OK, FX_KV_ADMIT_LATER, FX_KV_ADMIT_NEVER };
/* Reserves room for n more rows of seq in full (its length does not change), or returns
 * FX_ERR_CAPACITY having changed nothing; *why (may be NULL) says which. Forward steps reserve
 * for themselves; a scheduler reserves ahead to admit a request. */
fx_status fx_kv_seq_reserve(struct fx_kv_pool *pool, fx_seq_id seq, int32_t n,
                            enum fx_kv_admit *why, struct fx_error *err);

struct fx_kv_pool_stats {
    int32_t n_blocks;        /* in the pool */
    int32_t n_free;          /* on the free list */
    int32_t n_cached_idle;   /* in the prefix cache and held by no sequence (evictable) */
    int32_t n_seq;           /* live sequences */
    uint64_t prefix_queries; /* blocks looked up by fx_kv_seq_create_cached */
    uint64_t prefix_hits;    /* of those, found */
    uint64_t evictions;      /* cached blocks taken back for new rows */
};
void fx_kv_pool_stats(const struct fx_kv_pool *pool, struct fx_kv_pool_stats *out);
/* Drops every idle block of the prefix cache onto the free list. */
void fx_kv_pool_clear_cache(struct fx_kv_pool *pool);

/* One token at the end of seq (pos = its length); logits: [n_vocab]. Bit-identical to
 * fx_forward_token over a contiguous cache of the same types. */
fx_status fx_forward_token_paged(struct fx_context *ctx, struct fx_kv_pool *pool, fx_seq_id seq,
                                 fx_token token, int32_t pos, float *logits, struct fx_error *err);
/* Prefill of n tokens at the end of seq (pos0 = its length); logits of the last: [n_vocab]. */
fx_status fx_forward_batch_last_paged(struct fx_context *ctx, struct fx_kv_pool *pool,
                                      fx_seq_id seq, const fx_token *tokens, int32_t n,
                                      int32_t pos0, float *logits, struct fx_error *err);

/* One step of rows from many sequences (as llama_batch): row i is token[i] of sequence seq[i] at
 * position pos[i]; a sequence's rows come in position order, the first at its length. Row i's
 * logits are returned when logits[i] is nonzero (logits NULL: every row's), in row order: out is
 * [rows asked for][n_vocab]. */
struct fx_batch {
    int32_t n;
    const fx_token *token; /* [n] */
    const int32_t *pos;    /* [n] */
    const fx_seq_id *seq;  /* [n] */
    const int8_t *logits;  /* [n] or NULL */
    /* [n] or NULL (none kept). Rollback for a model with a recurrent state (the rows of a verify
     * step but the last): where snapshot[i] is nonzero, the state of seq[i] after row i is kept,
     * so that fx_kv_seq_truncate may then cut the sequence back to pos[i] + 1 positions, until
     * its next step or a truncation that cuts. A sequence keeps at most FX_ROLLBACK_MAX states
     * (each allocated by the first step that needs it, released with the sequence): its marked
     * rows but its last of the step are among its first FX_ROLLBACK_MAX rows of the step. The
     * same bits either way; other models ignore it (their truncation needs nothing kept). */
    const int8_t *snapshot;
};
fx_status fx_forward_multi_seq(struct fx_context *ctx, struct fx_kv_pool *pool,
                               const struct fx_batch *batch, float *out, struct fx_error *err);

/* Saved state of one sequence, in the format of fx_context_state_save (which see for the
 * guarantees and error codes). m is the model the pool was made for. fx_kv_seq_save writes every
 * position of live sequence seq to path (through a temporary file renamed into place); the pool
 * is not changed. fx_kv_seq_load validates the whole file against m and the pool's KV types,
 * then makes a new sequence *out holding all of the file's positions and tokens (full blocks join
 * the prefix cache); FX_ERR_CAPACITY, with the pool as it was, when the sequences or blocks are
 * not to be had. */
fx_status fx_kv_seq_save(const struct fx_kv_pool *pool, fx_seq_id seq, const struct fx_model *m,
                         const char *path, struct fx_error *err);
fx_status fx_kv_seq_load(struct fx_kv_pool *pool, const struct fx_model *m, const char *path,
                         fx_seq_id *out, struct fx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sampling
 *
 * A sampler picks the next token from a row of logits through the chain llama.cpp's tools use by
 * default:
 *
 *   logit bias -> repetition/frequency/presence penalties -> top-k -> top-p -> min-p
 *     -> temperature -> draw
 *
 * Each step acts on the candidates the previous one left. Top-p and min-p measure probabilities
 * at temperature 1 (temperature comes last, as in llama.cpp). Temperature 0 is greedy: the token
 * with the largest logit after bias and penalties, ties going to the lowest id; it draws no random
 * number. The draw uses the sampler's own generator, seeded from `seed`: the same seed,
 * parameters, accepted tokens and logits give the same tokens whatever the number of threads,
 * because sampling is single-threaded and reads nothing else (ties are broken by token id
 * everywhere).
 *
 * Everything is allocated by fx_sampler_create for the vocabulary size; sampling a token
 * allocates nothing. A sampler belongs to one thread at a time.
 * ------------------------------------------------------------------------------------------- */

/* Adds `bias` to the logit of `token`; -INFINITY bans it. */
struct fx_logit_bias {
    fx_token token;
    float bias;
};

struct fx_sampler_params {
    float temperature;       /* >= 0; 0: greedy */
    int32_t top_k;           /* keep the k most likely tokens; <= 0: off */
    float top_p;             /* keep the fewest most likely tokens whose mass reaches top_p, in
                                [0, 1]; 1: off */
    float min_p;             /* keep tokens with p >= min_p * p_max, in [0, 1]; 0: off */
    int32_t penalty_last_n;  /* the penalties look at the last n accepted tokens; 0: off */
    float repeat_penalty;    /* > 0: a positive logit of a token in the window is divided by it,
                                a negative one multiplied; 1: off */
    float frequency_penalty; /* subtracted once per occurrence in the window; 0: off */
    float presence_penalty;  /* subtracted once if the token occurs in the window; 0: off */
    const struct fx_logit_bias *logit_bias; /* n_logit_bias entries, copied by create; entries for
                                               the same token add up */
    size_t n_logit_bias;
    uint64_t seed;
};

/* llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, a window of 64 with
 * every penalty off, no bias, seed 0 (a fixed seed: pick another for varied output). */
struct fx_sampler_params fx_sampler_default_params(void);

struct fx_sampler;

/* Creates a sampler for logits of n_vocab entries. Parameters out of range are FX_ERR_INVALID_ARG
 * naming the parameter and value. */
fx_status fx_sampler_create(int32_t n_vocab, const struct fx_sampler_params *params,
                            struct fx_sampler **out, struct fx_error *err);
void fx_sampler_free(struct fx_sampler *s);

/* Picks a token from logits [n_vocab] (left unchanged; NaN counts as -INFINITY). Fails with
 * FX_ERR_INVALID_ARG, *out untouched, when bias and penalties leave no token with a finite logit.
 * The token is not accepted: call fx_sampler_accept with the token the caller keeps. */
fx_status fx_sampler_sample(struct fx_sampler *s, const float *logits, fx_token *out,
                            struct fx_error *err);

/* Appends a token to the penalty window (generated tokens; prompt tokens too when they should be
 * penalised, as llama.cpp's tools do). FX_ERR_INVALID_ARG for an id outside [0, n_vocab). */
fx_status fx_sampler_accept(struct fx_sampler *s, fx_token token, struct fx_error *err);

/* Empties the penalty window and restarts the random sequence from the seed. */
void fx_sampler_reset(struct fx_sampler *s);

/* ---------------------------------------------------------------------------------------------
 * Speculative decoding
 *
 * A drafter guesses the next tokens of a sequence cheaply; one fx_forward_batch over [the last
 * token, the drafts] scores every guess at once (each weight read once for k + 1 positions), the
 * tokens the target agrees with are kept and the rest of the rows are rolled back with
 * fx_context_kv_truncate. A row's arithmetic does not depend on its batch, so a row scored during
 * verification has the bits it would have had in plain decoding.
 *
 * Drafters here are deterministic (prompt lookup, a draft model or the model's own MTP head run
 * greedily), so the drafting distribution q is a point mass on the draft x. The
 * speculative-sampling rule (accept x with probability min(1, p(x) / q(x)), else draw from the
 * normalised max(0, p - q)) then reads: accept x with probability p(x), else draw from p without
 * x. Drawing the row's token from p with the sampler's next random number and accepting x when
 * it is that token is exactly this rule, and consumes the random numbers plain decoding consumes:
 * with the same seed and parameters, speculative output is byte-identical to plain decoding at
 * every temperature, not only at temperature 0. fx_sampler_sample_draft also implements the rule
 * for a general q.
 *
 * Ownership and threads: a drafter and a speculation state belong to one thread at a time, with
 * the context they work on. A draft-model drafter owns its own context over a borrowed draft
 * model; the MTP drafter borrows the target's context; fx_spec borrows the target's context and
 * the drafter.
 * ------------------------------------------------------------------------------------------- */

/* The distribution the sampler draws from for logits [n_vocab], after the whole chain (bias,
 * penalties, truncations, temperature): *n candidates ids[i] with probabilities probs[i] summing
 * to 1 (ids and probs hold n_vocab entries). At temperature 0 it is the greedy token with
 * probability 1. Draws no random number and accepts nothing. */
fx_status fx_sampler_dist(struct fx_sampler *s, const float *logits, fx_token *ids, float *probs,
                          int32_t *n, struct fx_error *err);

/* Samples the token of a row that a drafter guessed `draft` for, by the speculative-sampling
 * rule; *accepted tells whether *out is the draft. q is the drafter's distribution [n_vocab]
 * (entries summing to 1, q[draft] > 0), or NULL for a deterministic drafter (a point mass on
 * draft): then the row is sampled exactly as fx_sampler_sample samples it, one random number (none
 * at temperature 0), and accepted when it is the draft. With q, it draws one number for the test
 * and one more after a rejection. The token is not accepted into the penalty window. */
fx_status fx_sampler_sample_draft(struct fx_sampler *s, const float *logits, fx_token draft,
                                  const float *q, fx_token *out, bool *accepted,
                                  struct fx_error *err);

struct fx_drafter;

/* Prompt lookup (llama.cpp's ngram-simple, vLLM's [ngram]): the last n tokens of the sequence,
 * n from n_max down to n_min, are looked up in the sequence before them (prompt and output); the
 * most recent earlier occurrence proposes what followed it (copying on through the proposal
 * itself, as LZ77 does, when the occurrence overlaps the end). */
struct fx_drafter_ngram_params {
    int32_t n_max; /* 3 */
    int32_t n_min; /* 1 */
};
struct fx_drafter_ngram_params fx_drafter_ngram_default_params(void);
fx_status fx_drafter_ngram_create(const struct fx_drafter_ngram_params *params,
                                  struct fx_drafter **out, struct fx_error *err);

/* A draft model: a second, smaller model with the target's vocabulary (the same tokenizer
 * model, token count and token texts: otherwise FX_ERR_INVALID_ARG naming the first difference),
 * run greedily on its own context made with cp (n_ctx at least the target context's), kept in
 * step with the sequence by truncating its cache to the common prefix. Borrows both models. */
fx_status fx_drafter_model_create(const struct fx_model *target, const struct fx_model *draft,
                                  const struct fx_context_params *cp, struct fx_drafter **out,
                                  struct fx_error *err);
/* The model's own multi-token-prediction head (fx_model_n_nextn > 0; Qwen3.5's NextN block),
 * inside the target's context ctx (borrowed; the head's cache is part of it), which fx_spec must
 * then run on: a step that drafts is fx_forward_verify_mtp, whose folded head rows give the next
 * step's first draft; further drafts chain through the head's hidden output (one fx_forward_mtp
 * row each). Prompts, and steps that draft nothing, are evaluated through fx_forward_prefill_mtp,
 * which catches the head up in the same pass without its vocabulary projection; the next draft
 * then costs one fx_forward_mtp row first. FX_ERR_UNSUPPORTED for a model without a head. */
fx_status fx_drafter_mtp_create(struct fx_context *ctx, struct fx_drafter **out,
                                struct fx_error *err);
void fx_drafter_free(struct fx_drafter *d);
/* "ngram", "draft" or "mtp". */
const char *fx_drafter_name(const struct fx_drafter *d);

/* Proposes up to k (>= 0) tokens to follow seq[0..n_seq) into draft[0..*n_draft). Entries of
 * seq may be FX_TOKEN_NULL where the caller does not know them (positions loaded from a saved
 * state); nothing is proposed from or through them. */
fx_status fx_drafter_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                             fx_token *draft, int32_t *n_draft, struct fx_error *err);
/* Tells the drafter that of the n_draft tokens it last proposed the first n_accepted were kept. */
void fx_drafter_accepted(struct fx_drafter *d, int32_t n_draft, int32_t n_accepted);

/* Speculation over one sequence of a context's contiguous cache. */
struct fx_spec;

struct fx_spec_params {
    int32_t draft_max; /* most tokens drafted per step (16) */
    int32_t draft_min; /* a shorter draft is not verified: a plain step instead (0) */
    /* true (the default): k adapts to the recent acceptance rate (a draft row is added while
     * its chance of being kept exceeds its measured cost relative to a plain step) and
     * speculation switches itself off for a while when a token costs more through it than
     * through plain decoding (measured). false: always draft_max, never off. */
    bool adaptive;
};
struct fx_spec_params fx_spec_default_params(void);

/* The state borrows ctx and d; it allocates the verification logits ([draft_max + 1][n_vocab]). */
fx_status fx_spec_create(struct fx_context *ctx, struct fx_drafter *d,
                         const struct fx_spec_params *params, struct fx_spec **out,
                         struct fx_error *err);
void fx_spec_free(struct fx_spec *s);

/* Receives each token a step yields, in order; setting *stop ends the step after this token. */
typedef fx_status (*fx_spec_emit_fn)(void *user, fx_token token, bool *stop, struct fx_error *err);

/* Evaluates a prompt (or the rest of one) seq[pos0..n_seq) at positions pos0.. of the context,
 * as fx_forward_batch_last: logits [n_vocab] of its last row. A drafter that reads the target's
 * hidden states (the MTP head) sees them on the way and catches up; for the others this is
 * fx_forward_batch_last itself. */
fx_status fx_spec_prefill(struct fx_spec *s, const fx_token *seq, int32_t n_seq, int32_t pos0,
                          float *logits, struct fx_error *err);

/* One decoding step. seq[0..n_seq) is the sequence; its last token has been sampled (and
 * accepted by the sampler) but not evaluated: fx_context_kv_len(ctx) == n_seq - 1. The step
 * drafts up to k tokens (k <= n_max - 1 when n_max > 0, and within the context), evaluates [last,
 * drafts] in one fx_forward_batch (one fx_forward_token when nothing is drafted; with the MTP
 * drafter one fx_forward_verify_mtp, or one fx_forward_prefill_mtp when nothing is drafted), then
 * for each row in order samples its token (fx_sampler_sample_draft), accepts it into the sampler
 * and hands it to emit, until a token differs from its draft, the rows run out, or emit says
 * stop. The cache then holds the sequence and every yielded token except the last (rejected rows
 * rolled back); *n_out (may be NULL) receives the number of tokens yielded (>= 1 on success). */
fx_status fx_spec_step(struct fx_spec *s, struct fx_sampler *smp, const fx_token *seq,
                       int32_t n_seq, int32_t n_max, fx_spec_emit_fn emit, void *user,
                       int32_t *n_out, struct fx_error *err);

struct fx_spec_stats {
    uint64_t steps;        /* fx_spec_step calls */
    uint64_t verify_steps; /* of those, with drafts verified in a batch */
    uint64_t drafted;      /* draft tokens verified */
    uint64_t accepted;     /* of those, kept */
    uint64_t verify_out;   /* tokens yielded by verify steps (accepted drafts plus the next) */
    uint64_t plain_out;    /* tokens yielded by plain steps */
    uint64_t switched_off; /* times speculation switched itself off */
    double verify_seconds, plain_seconds; /* drafting and forward time of each kind of step */
};
void fx_spec_stats(const struct fx_spec *s, struct fx_spec_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Stopping
 *
 * A stopper decides when generation ends and which text may be shown so far. Feed it every
 * generated token with its detokenized piece; it ends generation on a stop token (whose text is
 * not part of the output), on a stop string (the output is cut where the string starts, and the
 * string may span any number of tokens), or after max_tokens tokens. While streaming it holds back
 * the text that could still turn out to be the start of a stop string, and an incomplete UTF-8
 * sequence at the end, so that nothing it has released ever has to be taken back. A stopper
 * belongs to one thread at a time.
 * ------------------------------------------------------------------------------------------- */

struct fx_stop_params {
    const char *const *strings; /* n_strings non-empty NUL-terminated strings, copied */
    size_t n_strings;
    const fx_token *tokens; /* n_tokens ids (end of text, end of turn...), copied */
    size_t n_tokens;
    int64_t max_tokens; /* stop after this many tokens; <= 0: no limit */
};

enum fx_stop_reason {
    FX_STOP_NONE = 0,   /* generation goes on */
    FX_STOP_TOKEN,      /* the token pushed is a stop token */
    FX_STOP_STRING,     /* a stop string appeared in the text */
    FX_STOP_MAX_TOKENS, /* max_tokens tokens were pushed */
};

struct fx_stop_result {
    enum fx_stop_reason reason;
    int32_t which;    /* index of the stop string or stop token in the params; -1 otherwise */
    const char *text; /* the text to emit now, len bytes (not NUL-terminated), owned by the
                         stopper and valid until its next call */
    size_t len;
    uint64_t text_end; /* bytes emitted so far, this text included; once stopped, the offset in
                          the concatenated pieces where the output ends */
};

struct fx_stopper;

fx_status fx_stopper_create(const struct fx_stop_params *params, struct fx_stopper **out,
                            struct fx_error *err);
void fx_stopper_free(struct fx_stopper *st);

/* Feeds one generated token and its piece (len bytes of UTF-8, possibly incomplete). When the
 * result's reason is not FX_STOP_NONE, generation is over and the result's text is the rest of
 * the output. FX_ERR_INVALID_ARG after the stopper has stopped; FX_ERR_NOMEM when the text it
 * must hold cannot grow. */
fx_status fx_stopper_push(struct fx_stopper *st, fx_token token, const char *piece, size_t len,
                          struct fx_stop_result *out, struct fx_error *err);

/* Ends generation for another reason (context full, cancelled): releases the text held back. */
void fx_stopper_finish(struct fx_stopper *st, struct fx_stop_result *out);

/* Makes the stopper ready for a new generation with the same parameters. */
void fx_stopper_reset(struct fx_stopper *st);

/* ---------------------------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------------------------- */

/* The name of the kernel table this process computes with ("generic", "avx2" or "avx512"),
 * chosen once from the CPU's features, or forced with the environment variable
 * FERROX_CPU=generic|avx2|avx512 (an unknown or unsupported name is reported on stderr and the
 * best supported table is used). Thread-safe. */
const char *fx_kernels_name(void);

/* ---------------------------------------------------------------------------------------------
 * Quantization
 *
 * fx_model_quantize writes a copy of a GGUF model with its weights converted, as llama-quantize
 * does: the same metadata (general.file_type and general.quantization_version = 2 set, split keys
 * dropped), tensors in llama.cpp's order, 2-D and 3-D weights converted from F32, F16 or BF16
 * with llama.cpp's reference encoders (byte-identical files for the same choices), norms, biases
 * and MoE routers kept as they are. The file is written under a temporary name and renamed into
 * place, so a failure leaves no partial output.
 * ------------------------------------------------------------------------------------------- */

struct fx_quantize_params {
    /* A llama.cpp file type name: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S,
     * Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE (any case;
     * Q3_K, Q4_K and Q5_K are the _M mixes, as in llama-quantize). */
    const char *type;
    bool pure;         /* every converted tensor gets the type's base type (no mix), like
                          llama-quantize --pure */
    int32_t n_threads; /* workers; 0: one per CPU this process may use */
    /* Called from the calling thread as work completes, with the elements written so far and
     * the total; NULL for none. */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
};

struct fx_quantize_params fx_quantize_default_params(void); /* Q8_0, not pure, all CPUs */

/* Converts the model at in_path into out_path. FX_ERR_INVALID_ARG for an unknown type name,
 * FX_ERR_UNSUPPORTED for a weight that cannot be converted (an already quantized input weight,
 * rows that fit no block size), FX_ERR_IO / FX_ERR_FORMAT for unreadable input or an unwritable
 * output; the message names the file, tensor or key. */
fx_status fx_model_quantize(const char *in_path, const char *out_path,
                            const struct fx_quantize_params *params, struct fx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Chat templates
 *
 * A chat template turns a conversation into the prompt text a model was trained on. Models carry
 * theirs as a Jinja template (the GGUF key tokenizer.chat_template). ferrox interprets the subset
 * of Jinja that chat templates use, with the settings Hugging Face transformers renders them with
 * (trim_blocks, lstrip_blocks, loop controls, an immutable sandbox, transformers' tojson), so a
 * template nobody listed renders as it would in transformers. The published templates of known
 * families are also built in by name (fx_chat_builtin_name) for files that carry none.
 *
 * Ownership and threads: a template is immutable once created; any number of threads may render
 * the same one at once. Each render allocates its working memory and frees it before returning;
 * the only thing that persists is the caller's struct fx_chat_text, whose buffer is reused by the
 * next render into it. Parse once, render the whole conversation every turn (well under a
 * microsecond per message) and prefill only the suffix that differs from the previous render:
 * compare rather than assume an append, because some templates rewrite earlier turns (Qwen 3 and
 * DeepSeek R1 drop the reasoning of past answers). Templates that print bos_token themselves
 * (Llama 3, Gemma, Mistral, DeepSeek) need the text tokenized without adding another BOS.
 *
 * Known differences from Python, none used by the built-in templates: integers are 64-bit
 * (overflow is an error), upper/lower/title/capitalize change ASCII letters only, and str.format,
 * {% include %}, {% call %}, {% with %} and recursive loops are not supported.
 *
 * Failures are fx_status errors whose message gives the line and column in the template
 * ("chat template: line 1, column 412: template raised: Conversation roles must alternate..."),
 * with err->offset the byte offset: FX_ERR_FORMAT for syntax errors and errors while rendering,
 * FX_ERR_INVALID_ARG when the template itself rejects the conversation (raise_exception), and
 * FX_ERR_CAPACITY when a limit in struct fx_chat_params is exceeded (hostile templates).
 * ------------------------------------------------------------------------------------------- */

struct fx_chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool", ... (NUL-terminated) */
    const char *content; /* NUL-terminated UTF-8; NULL renders as None (an assistant turn that
                            only calls tools) */
};

struct fx_chat_template;

/* Parses a Jinja chat template of len bytes (copied). Syntax errors, unknown filters and tests,
 * and unsupported tags ({% include %}, {% call %}, recursive loops) fail here. */
fx_status fx_chat_template_create(const char *source, size_t len, struct fx_chat_template **out,
                                  struct fx_error *err);
/* A built-in template by name (see fx_chat_builtin_name); FX_ERR_NOT_FOUND names the choices. */
fx_status fx_chat_template_builtin(const char *name, struct fx_chat_template **out,
                                   struct fx_error *err);
void fx_chat_template_free(struct fx_chat_template *t);

/* The name of the built-in whose text is exactly this template's, or NULL. */
const char *fx_chat_template_builtin_name(const struct fx_chat_template *t);

/* Built-in template names in a fixed order, i from 0 until NULL: chatml, qwen2, qwen2.5, qwen3,
 * smollm2, llama2, llama3, llama3.1, llama3.2, mistral-v1, mistral-v3, mistral-v3-tekken,
 * mistral-v7, gemma, gemma3, phi3, deepseek, deepseek-v2.5, deepseek-r1, gpt-oss. */
const char *fx_chat_builtin_name(size_t i);
/* The template text of a built-in (static storage), or NULL when the name is unknown. */
const char *fx_chat_builtin_source(const char *name);

/* strftime_now() in templates formats the current local time unless a time is injected. */
#define FX_CHAT_NOW_LOCAL INT64_MIN

/* Defaults: fx_chat_default_params. */
struct fx_chat_params {
    bool add_generation_prompt; /* end with the header that starts the assistant's turn (true) */
    const char *bos_token;      /* the variables bos_token and eos_token; NULL means "" */
    const char *eos_token;
    /* NULL, or a JSON object whose members become template variables: tools, documents,
     * enable_thinking, reasoning_effort, date_string, builtin_tools, ... They are set after
     * add_generation_prompt, bos_token and eos_token (and may replace them); "messages" is not
     * allowed. */
    const char *vars_json;
    int64_t now;        /* for strftime_now(): seconds since the epoch, shown as UTC, or
                           FX_CHAT_NOW_LOCAL (the default) */
    size_t max_output;  /* bytes of rendered text; default 16 MiB */
    size_t max_memory;  /* bytes of working memory per render; default 64 MiB */
    uint64_t max_steps; /* evaluated template nodes; default 50,000,000 */
    uint32_t max_depth; /* nesting of evaluation (macro recursion); default 1000 */
};

void fx_chat_default_params(struct fx_chat_params *p);

/* Rendered text. Zero-initialise before the first render; each render replaces the contents and
 * reuses the buffer. data is NUL-terminated (len excludes the NUL). */
struct fx_chat_text {
    char *data;
    size_t len, cap;
};

void fx_chat_text_free(struct fx_chat_text *text);

/* Renders the conversation msgs[0..n_msgs) into out (p may be NULL for the defaults; msgs may be
 * NULL when n_msgs is 0). On failure out->len is 0. */
fx_status fx_chat_render(const struct fx_chat_template *t, const struct fx_chat_msg *msgs,
                         size_t n_msgs, const struct fx_chat_params *p, struct fx_chat_text *out,
                         struct fx_error *err);

/* The same with the messages as a JSON array of objects (OpenAI chat format: role, content as a
 * string, null or a list of parts, tool_calls, tool_call_id, name, reasoning_content, thinking,
 * ...), every member reaching the template as written. */
fx_status fx_chat_render_json(const struct fx_chat_template *t, const char *messages_json,
                              size_t len, const struct fx_chat_params *p, struct fx_chat_text *out,
                              struct fx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer
 *
 * A vocabulary turns text into token ids and back, exactly as llama.cpp does with the same GGUF
 * keys (tokenizer.ggml.*). Three models are supported: SentencePiece-style BPE with byte
 * fallback ("llama": Llama 1/2, Mistral, Gemma, Phi-3), byte-level BPE with a regex
 * pre-tokenizer chosen by tokenizer.ggml.pre ("gpt2": GPT-2, Llama 3, Qwen 2/3, SmolLM2,
 * DeepSeek, Falcon, StarCoder, MPT, Refact, gpt-oss) and WordPiece ("bert").
 *
 * Ownership and threads: a vocabulary copies what it needs from the file, so the GGUF file may
 * be closed once fx_vocab_load returns. It is immutable afterwards: any number of threads may
 * call every function below on one vocabulary at the same time (each call keeps its scratch
 * memory to itself). Pointers a vocabulary returns live until fx_vocab_free. A streaming
 * detokenizer belongs to one thread at a time.
 * ------------------------------------------------------------------------------------------- */

#define FX_TOKEN_NULL (-1) /* "no token" */

enum fx_vocab_type {
    FX_VOCAB_SPM = 1, /* "llama" */
    FX_VOCAB_BPE = 2, /* "gpt2" */
    FX_VOCAB_WPM = 3, /* "bert" */
};

/* Token attributes (a bit set), from tokenizer.ggml.token_type and llama.cpp's corrections. */
enum fx_token_attr {
    FX_TOKEN_ATTR_UNDEFINED = 0,
    FX_TOKEN_ATTR_UNKNOWN = 1 << 0,
    FX_TOKEN_ATTR_UNUSED = 1 << 1,
    FX_TOKEN_ATTR_NORMAL = 1 << 2,
    FX_TOKEN_ATTR_CONTROL = 1 << 3,      /* BOS, EOS, chat markers: text only when asked */
    FX_TOKEN_ATTR_USER_DEFINED = 1 << 4, /* added tokens: always matched in text, always shown */
    FX_TOKEN_ATTR_BYTE = 1 << 5,         /* <0xNN> */
    FX_TOKEN_ATTR_LSTRIP = 1 << 6,       /* matched in text, it swallows white space before it */
    FX_TOKEN_ATTR_RSTRIP = 1 << 7,       /* ... and after it */
};

struct fx_vocab;

/* Loads the vocabulary of an open GGUF file. Fails with FX_ERR_NOT_FOUND when the file has no
 * tokenizer.ggml.model, FX_ERR_UNSUPPORTED for an unknown model or pre-tokenizer name (a file
 * without tokenizer.ggml.pre gets the "default" one and a warning on stderr), FX_ERR_FORMAT for
 * malformed keys. */
fx_status fx_vocab_load(const struct fx_gguf *g, struct fx_vocab **out, struct fx_error *err);
/* Opens path (a model or a vocabulary-only GGUF), loads its vocabulary and closes it. */
fx_status fx_vocab_load_file(const char *path, struct fx_vocab **out, struct fx_error *err);
void fx_vocab_free(struct fx_vocab *v);

enum fx_vocab_type fx_vocab_type(const struct fx_vocab *v);
/* The pre-tokenizer in use ("llama-bpe", "qwen2", ...); "" for SPM and WordPiece. */
const char *fx_vocab_pre(const struct fx_vocab *v);
int32_t fx_vocab_n_tokens(const struct fx_vocab *v);
/* Special ids; FX_TOKEN_NULL when the vocabulary has none. EOT is the end-of-turn token
 * (<|eot_id|>, <|im_end|>, <end_of_turn> ...), named by the file or found by its text. */
fx_token fx_vocab_bos(const struct fx_vocab *v);
fx_token fx_vocab_eos(const struct fx_vocab *v);
fx_token fx_vocab_eot(const struct fx_vocab *v);
fx_token fx_vocab_unk(const struct fx_vocab *v);
fx_token fx_vocab_sep(const struct fx_vocab *v);
fx_token fx_vocab_pad(const struct fx_vocab *v);
/* Whether fx_tokenize with add_special puts BOS first / EOS last. */
bool fx_vocab_add_bos(const struct fx_vocab *v);
bool fx_vocab_add_eos(const struct fx_vocab *v);
/* True for every token that ends generation (EOS, EOT, EOM and their kin). */
bool fx_vocab_is_eog(const struct fx_vocab *v, fx_token id);
/* enum fx_token_attr bits of id; 0 for an id outside the vocabulary. */
uint32_t fx_vocab_token_attr(const struct fx_vocab *v, fx_token id);
float fx_vocab_token_score(const struct fx_vocab *v, fx_token id);
/* The token's text as the file stores it ("▁the", "Ġthe", "<s>"); NULL for an invalid id. */
const char *fx_vocab_token_text(const struct fx_vocab *v, fx_token id, size_t *len);
/* The id whose stored text is exactly text[0..len), or FX_TOKEN_NULL. */
fx_token fx_vocab_find_token(const struct fx_vocab *v, const char *text, size_t len);

/* Tokenizes text[0..len). Any bytes are accepted: invalid UTF-8 becomes byte tokens (a byte
 * that a byte-level vocabulary has no token for, such as 0xFF in most of them, is dropped, as
 * llama.cpp drops it; WordPiece drops what is not text). add_special adds BOS / EOS (WordPiece:
 * [CLS] / [SEP]) as the vocabulary says.
 * parse_special makes control tokens written in the text (<|im_start|>, <s>) single tokens;
 * user-defined tokens are always recognised, like llama.cpp. Writes at most cap ids; *n_ids
 * receives the number of tokens, and when it exceeds cap the call fails with FX_ERR_CAPACITY
 * so that the caller can retry with *n_ids slots. */
fx_status fx_tokenize(const struct fx_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, fx_token *ids, size_t cap, size_t *n_ids,
                      struct fx_error *err);

/* fx_tokenize into a malloc'd array *ids of *n_ids tokens (the caller frees it; NULL on
 * failure), as `ferrox run` and the server read a prompt: with add_special, a BOS that the text
 * writes itself (a chat template's bos_token, read as a token with parse_special) right after
 * the one the vocabulary adds is not doubled. */
fx_status fx_tokenize_alloc(const struct fx_vocab *v, const char *text, size_t len,
                            bool add_special, bool parse_special, fx_token **ids, size_t *n_ids,
                            struct fx_error *err);

/* What token id stands for in text: "▁the" gives " the", <0x0A> a newline, "Ġthe" " the".
 * Control and unknown tokens give their text when render_special is true and "" otherwise.
 * Returns a pointer into the vocabulary (not NUL-terminated; *len bytes), or NULL for an id
 * outside it. A piece may be part of a UTF-8 character (byte tokens). */
const char *fx_token_to_piece(const struct fx_vocab *v, fx_token id, bool render_special,
                              size_t *len);

enum fx_detok_flags {
    /* Drop a leading BOS and a trailing EOS when the vocabulary adds them (llama.cpp's
     * remove_special; a dropped BOS keeps the space that follows it). */
    FX_DETOK_REMOVE_SPECIAL = 1 << 0,
    /* Write control and unknown tokens as their text instead of nothing. */
    FX_DETOK_RENDER_SPECIAL = 1 << 1,
    /* The ids continue earlier text: keep the leading space of the first piece that SentencePiece
     * vocabularies otherwise remove (it stands for the space they prefix when tokenizing). */
    FX_DETOK_CONTINUE = 1 << 2,
};

/* Decodes ids[0..n) into buf, NUL-terminated: the concatenation of their pieces, less the
 * SentencePiece prefix space (see FX_DETOK_CONTINUE). Nothing else is rewritten (llama.cpp's
 * clean_spaces, which turns " ," into "," for some vocabularies, is not applied), so that the
 * text equals what a stream of pieces shows and byte-level BPE round-trips exactly. Bytes that are
 * not valid UTF-8 (an incomplete character at the end, odd byte tokens) are written as they are.
 * *len receives the text length without the NUL; when len + 1 > cap the call fails with
 * FX_ERR_CAPACITY (buf holds nothing usable) so that the caller can retry. An id outside the
 * vocabulary is FX_ERR_INVALID_ARG. */
fx_status fx_detokenize(const struct fx_vocab *v, const fx_token *ids, size_t n, unsigned flags,
                        char *buf, size_t cap, size_t *len, struct fx_error *err);

/* A streaming detokenizer: fed one id at a time (as a model generates them), it hands out text
 * that ends on a character boundary, holding back the bytes of a UTF-8 character that is not
 * complete yet. Everything it hands out, followed by fx_detok_stream_flush, equals
 * fx_detokenize of the same ids with the same flags. It borrows the vocabulary, which must
 * outlive it. No allocation happens after create. */
struct fx_detok_stream;

/* flags: FX_DETOK_RENDER_SPECIAL and FX_DETOK_CONTINUE (FX_DETOK_REMOVE_SPECIAL needs the whole
 * sequence and is refused). */
fx_status fx_detok_stream_create(const struct fx_vocab *v, unsigned flags,
                                 struct fx_detok_stream **out, struct fx_error *err);
void fx_detok_stream_free(struct fx_detok_stream *s);
/* Adds one id. *text / *len receive the text now complete (possibly empty); the pointer is
 * valid until the next call on this stream. */
fx_status fx_detok_stream_push(struct fx_detok_stream *s, fx_token id, const char **text,
                               size_t *len, struct fx_error *err);
/* Ends the sequence: hands out any held bytes (an unfinished character, as it is) and resets
 * the stream for a new sequence. */
void fx_detok_stream_flush(struct fx_detok_stream *s, const char **text, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* FERROX_H */
