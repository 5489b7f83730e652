/* Loading a vocabulary from an open GGUF file: reads the tokenizer.ggml.* keys llama.cpp reads,
 * checks their types and array lengths, and hands them to fx_vocab_build. */
#include <string.h>

#include "core/error.h"
#include "tok/vocab.h"

/* A string key, or NULL when absent. */
static fx_status opt_str(const struct fx_gguf *g, const char *key, const char **out,
                         struct fx_error *err) {
    struct fx_gguf_str s;
    fx_status st = fx_gguf_get_str(g, key, &s, err);
    *out = st == FX_OK ? s.data : NULL;
    if (st == FX_ERR_NOT_FOUND) {
        fx_error_clear(err);
        return FX_OK;
    }
    return st;
}

static fx_status opt_bool(const struct fx_gguf *g, const char *key, int8_t *out,
                          struct fx_error *err) {
    bool b;
    fx_status st = fx_gguf_get_bool(g, key, &b, err);
    if (st == FX_ERR_NOT_FOUND) {
        fx_error_clear(err);
        return FX_OK;
    }
    if (st == FX_OK)
        *out = b;
    return st;
}

/* A token id. Converters write "none" as -1 (or as 0xFFFFFFFF in an unsigned key): both mean
 * the key is absent. */
static fx_status opt_id(const struct fx_gguf *g, const char *key, int64_t *out,
                        struct fx_error *err) {
    const struct fx_gguf_kv *kv = fx_gguf_find_kv(g, key);
    if (!kv)
        return FX_OK;
    int64_t id;
    switch (kv->type) {
    case FX_GGUF_UINT8:
        id = kv->v.u8;
        break;
    case FX_GGUF_INT8:
        id = kv->v.i8;
        break;
    case FX_GGUF_UINT16:
        id = kv->v.u16;
        break;
    case FX_GGUF_INT16:
        id = kv->v.i16;
        break;
    case FX_GGUF_UINT32:
        id = kv->v.u32 == UINT32_MAX ? -1 : (int64_t)kv->v.u32;
        break;
    case FX_GGUF_INT32:
        id = kv->v.i32;
        break;
    case FX_GGUF_UINT64:
        id = kv->v.u64 > INT64_MAX ? -1 : (int64_t)kv->v.u64;
        break;
    case FX_GGUF_INT64:
        id = kv->v.i64;
        break;
    default:
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "%s: expected an integer, found %s",
                            key, fx_gguf_type_name(kv->type));
    }
    *out = id < 0 ? -1 : id;
    return FX_OK;
}

/* A per-token array: absent is fine, but when present it must cover every token. */
static fx_status per_token(const struct fx_gguf *g, const char *key, enum fx_gguf_type elem,
                           uint64_t n_tokens, const void **out, struct fx_error *err) {
    const struct fx_gguf_kv *kv = fx_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv)
        return FX_OK;
    if (kv->type != FX_GGUF_ARRAY || kv->arr_type != elem)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "%s: expected an array of %s", key,
                            fx_gguf_type_name(elem));
    if (kv->arr_n < n_tokens)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "%s has %llu entries for %llu tokens",
                            key, (unsigned long long)kv->arr_n, (unsigned long long)n_tokens);
    *out = kv->v.arr;
    return FX_OK;
}

fx_status fx_vocab_load(const struct fx_gguf *g, struct fx_vocab **out, struct fx_error *err) {
    if (!out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "fx_vocab_load: no output");
    *out = NULL;
    if (!g)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "fx_vocab_load: no file");
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    fx_status st;
    if ((st = opt_str(g, "tokenizer.ggml.model", &spec.model, err)) != FX_OK ||
        (st = opt_str(g, "tokenizer.ggml.pre", &spec.pre, err)) != FX_OK ||
        (st = opt_str(g, "general.name", &spec.name, err)) != FX_OK)
        return st;
    if (!spec.model)
        return fx_error_set(err, FX_ERR_NOT_FOUND, FX_NO_OFFSET,
                            "tokenizer.ggml.model is missing: the file has no vocabulary");

    const void *arr;
    if ((st = fx_gguf_get_arr(g, "tokenizer.ggml.tokens", FX_GGUF_STRING, &arr, &spec.n_tokens,
                              err)) != FX_OK)
        return st;
    spec.tokens = arr;

    const struct fx_gguf_kv *scores = fx_gguf_find_kv(g, "tokenizer.ggml.scores");
    enum fx_gguf_type score_type = FX_GGUF_FLOAT32;
    if (scores && scores->type == FX_GGUF_ARRAY && scores->arr_type == FX_GGUF_INT32)
        score_type = FX_GGUF_INT32;
    if ((st = per_token(g, "tokenizer.ggml.scores", score_type, spec.n_tokens, &arr, err)) != FX_OK)
        return st;
    if (score_type == FX_GGUF_INT32)
        spec.iscores = arr;
    else
        spec.scores = arr;
    if ((st = per_token(g, "tokenizer.ggml.token_type", FX_GGUF_INT32, spec.n_tokens, &arr, err)) !=
        FX_OK)
        return st;
    spec.types = arr;

    if (fx_gguf_find_kv(g, "tokenizer.ggml.merges")) {
        if ((st = fx_gguf_get_arr(g, "tokenizer.ggml.merges", FX_GGUF_STRING, &arr, &spec.n_merges,
                                  err)) != FX_OK)
            return st;
        spec.merges = arr;
    }

    for (int i = 0; i < FX_SPECIAL_COUNT; i++)
        if ((st = opt_id(g, fx_vocab_special_key((enum fx_vocab_special)i), &spec.special[i],
                         err)) != FX_OK)
            return st;
    if ((st = opt_bool(g, "tokenizer.ggml.add_bos_token", &spec.add_bos, err)) != FX_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_eos_token", &spec.add_eos, err)) != FX_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_sep_token", &spec.add_sep, err)) != FX_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err)) !=
            FX_OK ||
        (st = opt_bool(g, "tokenizer.ggml.normalizer.lowercase", &spec.lowercase, err)) != FX_OK ||
        (st = opt_bool(g, "tokenizer.ggml.normalizer.strip_accents", &spec.strip_accents, err)) !=
            FX_OK)
        return st;
    return fx_vocab_build(&spec, out, err);
}

fx_status fx_vocab_load_file(const char *path, struct fx_vocab **out, struct fx_error *err) {
    if (!out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "fx_vocab_load_file: no output");
    *out = NULL;
    struct fx_gguf *g;
    fx_status st = fx_gguf_open(path, &g, err);
    if (st != FX_OK)
        return st;
    st = fx_vocab_load(g, out, err);
    fx_gguf_free(g);
    if (st != FX_OK)
        fx_error_prefix(err, "%s", path);
    return st;
}
