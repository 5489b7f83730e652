/* ferrox tokenize: text to token ids with a model's (or a vocabulary-only file's) tokenizer.
 *
 *   ferrox tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--parse-special] [--bench]
 *
 * Default output: one line per token, "ID PIECE", the piece escaped so that the line stays one
 * line (\n, \t, \r, \\, and \xNN for other control bytes and bytes that are not UTF-8). --ids
 * prints exactly one line: the ids separated by single spaces. --bench prints instead how long
 * tokenizing and detokenizing the input takes (the fastest of three runs). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "core/clock.h"
#include "ferrox.h"
#include "tok/utf8.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] "
            "[--parse-special] [--bench]\n"
            "  -m MODEL          a GGUF model or vocabulary-only file\n"
            "  -p TEXT           the text to tokenize\n"
            "  -f FILE           read the text from FILE ('-' for standard input)\n"
            "  --ids             print only the ids, on one line, separated by spaces\n"
            "  --no-bos          add no BOS/EOS even if the model asks for them\n"
            "  --parse-special   turn special-token text (<s>, <|im_start|>) into those tokens\n"
            "  --bench           time tokenizing and detokenizing the text instead of printing\n");
}

/* Writes a piece so that it cannot break the line: valid UTF-8 characters as they are. */
static void put_escaped(const char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)p[i];
        uint32_t cp;
        size_t step = fx_utf8_decode((const uint8_t *)p + i, n - i, &cp);
        if (cp == 0xFFFD && step == 1 && c >= 0x80) {
            printf("\\x%02X", c); /* not UTF-8 (an encoded U+FFFD is 3 bytes) */
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c == '\t') {
            fputs("\\t", stdout);
        } else if (c == '\r') {
            fputs("\\r", stdout);
        } else if (c == '\\') {
            fputs("\\\\", stdout);
        } else if (c < 0x20 || c == 0x7F) {
            printf("\\x%02X", c);
        } else {
            fwrite(p + i, 1, step, stdout);
        }
        i += step;
    }
}

/* Tokenizes, growing the output once if the first guess is short. */
static fx_status tokenize(const struct fx_vocab *v, const char *text, size_t len, bool add_special,
                          bool parse_special, fx_token **ids, size_t *n, struct fx_error *err) {
    size_t cap = len + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        fx_token *grown = realloc(*ids, cap * sizeof **ids);
        if (!grown)
            return FX_ERR_NOMEM;
        *ids = grown;
        fx_status st = fx_tokenize(v, text, len, add_special, parse_special, *ids, cap, n, err);
        if (st != FX_ERR_CAPACITY)
            return st;
        cap = *n;
    }
    return FX_ERR_CAPACITY;
}

static int bench(const struct fx_vocab *v, const char *text, size_t len, bool add_special,
                 bool parse_special) {
    double best_tok = 1e30, best_detok = 1e30;
    fx_token *ids = NULL;
    char *out = malloc(4 * len + 64);
    size_t n = 0, out_len = 0;
    struct fx_error err = {0};
    for (int run = 0; run < 3 && out; run++) {
        double t0 = fx_now();
        if (tokenize(v, text, len, add_special, parse_special, &ids, &n, &err) != FX_OK)
            break;
        double t1 = fx_now();
        if (fx_detokenize(v, ids, n, 0, out, 4 * len + 64, &out_len, &err) != FX_OK)
            break;
        double t2 = fx_now();
        best_tok = t1 - t0 < best_tok ? t1 - t0 : best_tok;
        best_detok = t2 - t1 < best_detok ? t2 - t1 : best_detok;
    }
    free(ids);
    free(out);
    if (best_detok == 1e30) {
        fprintf(stderr, "ferrox tokenize: %s\n", err.msg[0] ? err.msg : "out of memory");
        return 1;
    }
    const char *kind = fx_vocab_type(v) == FX_VOCAB_SPM   ? "spm"
                       : fx_vocab_type(v) == FX_VOCAB_BPE ? "bpe"
                                                          : "wordpiece";
    printf("%s%s%s: %zu bytes -> %zu tokens; tokenize %.1f ms (%.1f MB/s), detokenize %.1f ms\n",
           kind, *fx_vocab_pre(v) ? " " : "", fx_vocab_pre(v), len, n, 1e3 * best_tok,
           (double)len / 1e6 / best_tok, 1e3 * best_detok);
    return 0;
}

int fx_cli_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, add_special = true, parse_special = false, timing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "-m") == 0 || strcmp(a, "-p") == 0 || strcmp(a, "-f") == 0) &&
            i + 1 < argc) {
            const char **slot = a[1] == 'm' ? &model : a[1] == 'p' ? &prompt : &file;
            *slot = argv[++i];
        } else if (strcmp(a, "--ids") == 0) {
            ids_only = true;
        } else if (strcmp(a, "--no-bos") == 0) {
            add_special = false;
        } else if (strcmp(a, "--parse-special") == 0) {
            parse_special = true;
        } else if (strcmp(a, "--bench") == 0) {
            timing = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ferrox tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!prompt) == (!file)) {
        fprintf(stderr, "ferrox tokenize: give -m MODEL and one of -p TEXT or -f FILE\n");
        usage(stderr);
        return 2;
    }

    size_t len = prompt ? strlen(prompt) : 0;
    char *text = NULL;
    if (file && !(text = fx_cli_read_file(file, &len))) {
        fprintf(stderr, "ferrox tokenize: cannot read '%s': %s\n", file, strerror(errno));
        return 1;
    }
    struct fx_vocab *v = NULL;
    struct fx_error err = {0};
    int rc = 1;
    fx_token *ids = NULL;
    size_t n = 0;
    if (fx_vocab_load_file(model, &v, &err) != FX_OK) {
        fprintf(stderr, "ferrox tokenize: %s\n", err.msg);
        goto done;
    }
    const char *t = prompt ? prompt : text;
    if (timing) {
        rc = bench(v, t, len, add_special, parse_special);
        goto done;
    }
    if (tokenize(v, t, len, add_special, parse_special, &ids, &n, &err) != FX_OK) {
        fprintf(stderr, "ferrox tokenize: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        size_t plen;
        const char *piece = fx_token_to_piece(v, ids[i], true, &plen);
        printf("%d ", ids[i]);
        put_escaped(piece, plen);
        putchar('\n');
    }
    if (ids_only)
        putchar('\n');
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ids);
    free(text);
    fx_vocab_free(v);
    return rc;
}
