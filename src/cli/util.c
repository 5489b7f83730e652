#include "cli/util.h"

#include "core/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool fx_cli_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

bool fx_cli_parse_size(const char *s, uint64_t *out) {
    char *end;
    if (*s < '0' || *s > '9')
        return false; /* strtoull would take a sign or blanks */
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    static const char suffixes[] = "KMGT";
    int shift = 0;
    if (*end) {
        const char *at = strchr(suffixes, toupper((unsigned char)*end));
        if (!at || end[1])
            return false;
        shift = 10 * (int)(at - suffixes + 1);
    }
    if (shift && v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

bool fx_cli_parse_int_list(const char *s, long lo, long hi, int **out, int *n) {
    *out = NULL;
    *n = 0;
    int cap = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end && *end != ','))
            goto bad;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            int *grown = realloc(*out, sizeof(int) * (size_t)cap);
            if (!grown)
                goto bad;
            *out = grown;
        }
        (*out)[(*n)++] = (int)v;
        if (!*end)
            return true;
        p = end + 1;
    }
bad:
    free(*out);
    *out = NULL;
    *n = 0;
    return false;
}

bool fx_cli_parse_ids(const char *s, fx_token **out, int *n) {
    int *ids;
    if (!fx_cli_parse_int_list(s, 0, INT32_MAX, &ids, n))
        return false;
    *out = ids; /* fx_token is int32_t, the same as int here */
    return true;
}

int fx_cli_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t written = fwrite(data, 1, size, f);
    int close_rc = fclose(f);
    return written == size && close_rc == 0 ? 0 : -1;
}

fx_token fx_cli_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

bool fx_cli_parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod also takes "nan" and hexadecimal; NaN fails the range check below. */
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = (float)v;
    return true;
}

static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *grown = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!grown) {
            free(buf);
            errno = ENOMEM;
            return NULL;
        }
        buf = grown;
        cap *= 2;
    }
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    if (ferror(f)) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *fx_cli_read_file(const char *path, size_t *len) {
    if (strcmp(path, "-") == 0)
        return read_stream(stdin, len);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = read_stream(f, len);
    int e = errno;
    fclose(f);
    errno = e;
    return buf;
}

static const struct {
    const char *name;
    enum fx_type type;
} kv_types[] = {{"f32", FX_TYPE_F32}, {"f16", FX_TYPE_F16}, {"q8_0", FX_TYPE_Q8_0}};

bool fx_cli_parse_kv_type(const char *s, enum fx_type *out) {
    for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
        if (strcasecmp(s, kv_types[i].name) == 0) {
            *out = kv_types[i].type;
            return true;
        }
    return false;
}

bool fx_cli_parse_moe_evict(const char *s, enum fx_moe_evict *out) {
    static const char *const names[] = {
        [FX_MOE_EVICT_QUOTA] = "quota", [FX_MOE_EVICT_LRU] = "lru", [FX_MOE_EVICT_LFU] = "lfu"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum fx_moe_evict)i;
            return true;
        }
    return false;
}

const char *fx_cli_kv_type_name(enum fx_type t) {
    for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
        if (kv_types[i].type == t)
            return kv_types[i].name;
    return "?";
}

void fx_cli_expand_aliases(int argc, char **argv) {
    static const char *const aliases[][2] = {
        {"-ctk", "--cache-type-k"},   {"-ctv", "--cache-type-v"}, {"-npp", "--n-prompt-parallel"},
        {"-ntg", "--n-gen-parallel"}, {"-npl", "--parallel"},     {"-ngl", "--n-gpu-layers"}};
    for (int i = 1; i < argc; i++)
        for (size_t a = 0; a < sizeof aliases / sizeof aliases[0]; a++)
            if (strcmp(argv[i], aliases[a][0]) == 0)
                argv[i] = (char *)aliases[a][1];
}

void fx_cli_moe_report(const struct fx_model *m, const char *what, struct fx_moe_stats *last) {
    struct fx_moe_stats now;
    fx_model_moe_stats(m, &now);
    if (now.cache_bytes == 0)
        return;
    uint64_t checked = now.lookahead_checked - last->lookahead_checked;
    uint64_t hits = now.lookahead_hits - last->lookahead_hits;
    fprintf(stderr,
            "moe %s: %llu of %llu experts missed, %.1f MiB read (%llu ahead), lookahead %.0f%% "
            "right (%llu of %llu), I/O %.2f ms, compute waited %.2f ms\n",
            what, (unsigned long long)(now.misses - last->misses),
            (unsigned long long)(now.experts_used - last->experts_used),
            (double)(now.bytes_read - last->bytes_read) / (1024.0 * 1024.0),
            (unsigned long long)(now.prefetches - last->prefetches),
            checked ? 100.0 * (double)hits / (double)checked : 0.0, (unsigned long long)hits,
            (unsigned long long)checked, (double)(now.io_ns - last->io_ns) / 1e6,
            (double)(now.wait_ns - last->wait_ns) / 1e6);
    *last = now;
}
