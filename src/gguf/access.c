/* Read access to an open GGUF file: header fields, pairs and tensors by position or name, and
 * typed getters that check a value's type and range before converting it. */
#include "gguf/gguf.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/error.h"

uint32_t fx_gguf_version(const struct fx_gguf *g) {
    return g->version;
}

uint64_t fx_gguf_alignment(const struct fx_gguf *g) {
    return g->alignment;
}

uint64_t fx_gguf_data_offset(const struct fx_gguf *g) {
    return g->data_offset;
}

uint64_t fx_gguf_file_size(const struct fx_gguf *g) {
    return g->size;
}

int64_t fx_gguf_n_kv(const struct fx_gguf *g) {
    return g->n_kv;
}

const struct fx_gguf_kv *fx_gguf_kv_at(const struct fx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const struct fx_gguf_kv *fx_gguf_find_kv(const struct fx_gguf *g, const char *key) {
    int64_t i = fx_name_index_find(&g->kv_index, key);
    return i >= 0 ? &g->kv[i] : NULL;
}

int64_t fx_gguf_n_tensors(const struct fx_gguf *g) {
    return g->n_tensors;
}

const struct fx_tensor_view *fx_gguf_tensor_at(const struct fx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct fx_tensor_view *fx_gguf_find_tensor(const struct fx_gguf *g, const char *name) {
    int64_t i = fx_name_index_find(&g->tensor_index, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- typed getters --------------------------------------------------------------------------- */

static uint64_t kv_offset(const struct fx_gguf *g, const struct fx_gguf_kv *kv) {
    return g->kv_offset[kv - g->kv];
}

static fx_status lookup(const struct fx_gguf *g, const char *key, const struct fx_gguf_kv **kv,
                        struct fx_error *err) {
    *kv = fx_gguf_find_kv(g, key);
    if (!*kv)
        return fx_error_set(err, FX_ERR_NOT_FOUND, FX_NO_OFFSET, "key '%s' not found", key);
    return FX_OK;
}

static fx_status wrong_type(const struct fx_gguf *g, const struct fx_gguf_kv *kv,
                            const char *expected, struct fx_error *err) {
    if (kv->type == FX_GGUF_ARRAY)
        return fx_error_set(err, FX_ERR_FORMAT, kv_offset(g, kv),
                            "key '%s' has type array of %s, expected %s", kv->key,
                            fx_gguf_type_name(kv->arr_type), expected);
    return fx_error_set(err, FX_ERR_FORMAT, kv_offset(g, kv), "key '%s' has type %s, expected %s",
                        kv->key, fx_gguf_type_name(kv->type), expected);
}

/* An integer value as sign and magnitude; false when the value is not an integer. */
static bool int_value(const struct fx_gguf_kv *kv, bool *neg, uint64_t *mag) {
    int64_t s;
    switch (kv->type) {
    case FX_GGUF_UINT8:
        *neg = false, *mag = kv->v.u8;
        return true;
    case FX_GGUF_UINT16:
        *neg = false, *mag = kv->v.u16;
        return true;
    case FX_GGUF_UINT32:
        *neg = false, *mag = kv->v.u32;
        return true;
    case FX_GGUF_UINT64:
        *neg = false, *mag = kv->v.u64;
        return true;
    case FX_GGUF_INT8:
        s = kv->v.i8;
        break;
    case FX_GGUF_INT16:
        s = kv->v.i16;
        break;
    case FX_GGUF_INT32:
        s = kv->v.i32;
        break;
    case FX_GGUF_INT64:
        s = kv->v.i64;
        break;
    default:
        return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

/* Reads an integer that must lie in [-min_mag, max]; the result as sign and magnitude. */
static fx_status get_int(const struct fx_gguf *g, const char *key, const char *expected,
                         uint64_t min_mag, uint64_t max, bool *neg, uint64_t *mag,
                         struct fx_error *err) {
    const struct fx_gguf_kv *kv;
    fx_status s = lookup(g, key, &kv, err);
    if (s != FX_OK)
        return s;
    if (!int_value(kv, neg, mag))
        return wrong_type(g, kv, expected, err);
    if (*neg ? *mag > min_mag : *mag > max)
        return fx_error_set(err, FX_ERR_FORMAT, kv_offset(g, kv),
                            "key '%s': value %s%" PRIu64 " does not fit %s", key, *neg ? "-" : "",
                            *mag, expected);
    return FX_OK;
}

fx_status fx_gguf_get_u32(const struct fx_gguf *g, const char *key, uint32_t *out,
                          struct fx_error *err) {
    bool neg;
    uint64_t mag;
    fx_status s = get_int(g, key, "uint32", 0, UINT32_MAX, &neg, &mag, err);
    if (s == FX_OK)
        *out = (uint32_t)mag;
    return s;
}

fx_status fx_gguf_get_u64(const struct fx_gguf *g, const char *key, uint64_t *out,
                          struct fx_error *err) {
    bool neg;
    uint64_t mag;
    fx_status s = get_int(g, key, "uint64", 0, UINT64_MAX, &neg, &mag, err);
    if (s == FX_OK)
        *out = mag;
    return s;
}

fx_status fx_gguf_get_i32(const struct fx_gguf *g, const char *key, int32_t *out,
                          struct fx_error *err) {
    bool neg;
    uint64_t mag;
    fx_status s = get_int(g, key, "int32", (uint64_t)INT32_MAX + 1, INT32_MAX, &neg, &mag, err);
    if (s == FX_OK)
        *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return s;
}

fx_status fx_gguf_get_i64(const struct fx_gguf *g, const char *key, int64_t *out,
                          struct fx_error *err) {
    bool neg;
    uint64_t mag;
    fx_status s = get_int(g, key, "int64", (uint64_t)INT64_MAX + 1, INT64_MAX, &neg, &mag, err);
    if (s == FX_OK)
        *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return s;
}

fx_status fx_gguf_get_f32(const struct fx_gguf *g, const char *key, float *out,
                          struct fx_error *err) {
    const struct fx_gguf_kv *kv;
    fx_status s = lookup(g, key, &kv, err);
    if (s != FX_OK)
        return s;
    if (kv->type == FX_GGUF_FLOAT32) {
        *out = kv->v.f32;
        return FX_OK;
    }
    if (kv->type != FX_GGUF_FLOAT64)
        return wrong_type(g, kv, "float32", err);
    double v = kv->v.f64;
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return fx_error_set(err, FX_ERR_FORMAT, kv_offset(g, kv),
                            "key '%s': value %g does not fit float32", key, v);
    *out = (float)v;
    return FX_OK;
}

fx_status fx_gguf_get_bool(const struct fx_gguf *g, const char *key, bool *out,
                           struct fx_error *err) {
    const struct fx_gguf_kv *kv;
    fx_status s = lookup(g, key, &kv, err);
    if (s != FX_OK)
        return s;
    if (kv->type != FX_GGUF_BOOL)
        return wrong_type(g, kv, "bool", err);
    *out = kv->v.b;
    return FX_OK;
}

fx_status fx_gguf_get_str(const struct fx_gguf *g, const char *key, struct fx_gguf_str *out,
                          struct fx_error *err) {
    const struct fx_gguf_kv *kv;
    fx_status s = lookup(g, key, &kv, err);
    if (s != FX_OK)
        return s;
    if (kv->type != FX_GGUF_STRING)
        return wrong_type(g, kv, "string", err);
    *out = kv->v.str;
    return FX_OK;
}

fx_status fx_gguf_get_arr(const struct fx_gguf *g, const char *key, enum fx_gguf_type elem,
                          const void **data, uint64_t *n, struct fx_error *err) {
    const struct fx_gguf_kv *kv;
    fx_status s = lookup(g, key, &kv, err);
    if (s != FX_OK)
        return s;
    if (kv->type != FX_GGUF_ARRAY || kv->arr_type != elem) {
        char expected[32];
        snprintf(expected, sizeof expected, "array of %s", fx_gguf_type_name(elem));
        return wrong_type(g, kv, expected, err);
    }
    *data = kv->v.arr;
    *n = kv->arr_n;
    return FX_OK;
}
