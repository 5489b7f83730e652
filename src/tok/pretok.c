/* Pre-tokenizer patterns (see pretok.h). The patterns follow the Hugging Face tokenizer.json of
 * each family as llama.cpp applies them, written for PCRE2 with Unicode properties (PCRE2_UCP:
 * \s, \p{L}, \p{N} are Unicode classes). Case-insensitive contractions are spelled out ('[sS])
 * rather than (?i:...), so that Unicode case folding cannot widen them (the long s, the Kelvin
 * sign). Each pattern sees one piece at a time, so \z and (?!\S) stop at the piece's end. */
#include "tok/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/utf8.h"

#define MAX_PATTERNS 6

/* The GPT-2 word pattern: contractions, letters, digits, other symbols, each optionally after
 * one space; then whitespace not followed by a non-space (so that the last space of a run joins
 * the next word). */
#define GPT2_WORDS "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

#define CONTRACTIONS_ANY_CASE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* Llama 3 and Qwen 2 differ only in how many digits make one word (DIGITS). */
#define LLAMA3_LIKE(DIGITS)                                                                        \
    CONTRACTIONS_ANY_CASE "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" DIGITS                                 \
                          "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-4o / o200k (gpt-oss, Llama 4) and Tekken (Mistral Nemo): words split at case changes. */
#define UPPER_THEN_LOWER                                                                           \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
#define UPPER_RUN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
#define CASED_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* DeepSeek LLM's cased-letter class (its tokenizer.json lists it character by character). */
#define DEEPSEEK_LETTERS                                                                           \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{"    \
    "293}"                                                                                         \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}"          \
    "\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{"    \
    "52F}"                                                                                         \
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{"     \
    "1CBA}"                                                                                        \
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"                 \
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"                 \
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"         \
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"        \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}"        \
    "\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"          \
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"        \
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"         \
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"                  \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"                 \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"               \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"         \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"

/* CJK ideographs, then everything from U+0800 to U+4E00, then Hangul (DeepSeek's own ranges). */
#define DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

struct family {
    const char *const *names; /* NULL-terminated */
    const char *patterns[MAX_PATTERNS];
    struct fx_pretok_traits traits;
};

static const char *const names_default[] = {"default", NULL};
static const char *const names_gpt2[] = {"gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", NULL};
static const char *const names_llama3[] = {"llama3",  "llama-v3", "llama-bpe",
                                           "falcon3", "pixtral",  NULL};
static const char *const names_llama3_merging[] = {"dbrx", "smaug-bpe", NULL};
static const char *const names_qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", NULL};
static const char *const names_starcoder[] = {"starcoder", "refact", "smollm",     "command-r",
                                              "codeshell", "exaone", "minerva-7b", NULL};
static const char *const names_falcon[] = {"falcon", NULL};
static const char *const names_deepseek_llm[] = {"deepseek-llm", NULL};
static const char *const names_deepseek_coder[] = {"deepseek-coder", NULL};
static const char *const names_deepseek_v3[] = {"deepseek-v3", NULL};
static const char *const names_gpt4o[] = {"gpt-4o", "llama4", NULL};
static const char *const names_tekken[] = {"tekken", NULL};
static const char *const names_superbpe[] = {"superbpe", NULL};

static const struct family families[] = {
    /* "default" (and a missing key): punctuation runs first, digits in threes last. */
    {names_default,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_WORDS, "\\p{N}+", "[0-9][0-9][0-9]"},
     {false, false}},
    {names_gpt2, {GPT2_WORDS}, {false, false}},
    {names_llama3, {LLAMA3_LIKE("\\p{N}{1,3}")}, {true, true}},
    {names_llama3_merging, {LLAMA3_LIKE("\\p{N}{1,3}")}, {false, false}},
    {names_qwen2, {LLAMA3_LIKE("\\p{N}")}, {false, false}},
    /* Every digit alone, then the GPT-2 words. */
    {names_starcoder, {"\\p{N}", GPT2_WORDS}, {false, false}},
    {names_falcon, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_WORDS, "[0-9][0-9][0-9]"}, {false, false}},
    {names_deepseek_llm,
     {"[\\r\\n]", "\\s?[" DEEPSEEK_LETTERS "]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+\\z", DEEPSEEK_CJK, "\\p{N}+"},
     {false, false}},
    {names_deepseek_coder,
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"},
     {false, false}},
    {names_deepseek_v3,
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     {false, false}},
    {names_gpt4o,
     {UPPER_THEN_LOWER CONTRACTIONS_ANY_CASE "?|" UPPER_RUN CONTRACTIONS_ANY_CASE
                                             "?|\\p{N}{1,3}" CASED_TAIL},
     {false, false}},
    {names_tekken, {UPPER_THEN_LOWER "|" UPPER_RUN "|\\p{N}" CASED_TAIL}, {true, true}},
    /* SuperBPE: no word split at all (its tokens span spaces), digit runs cut into threes from
     * the right by an empty lookahead match. */
    {names_superbpe, {"\\p{N}+", "(?=(?:\\d{3})+(?!\\d))"}, {false, false}},
};

struct fx_pretok {
    pcre2_code *code[MAX_PATTERNS];
    size_t n;
};

static const struct family *find_family(const char *name) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const char *const *n = families[f].names; *n; n++)
            if (strcmp(*n, name) == 0)
                return &families[f];
    return NULL;
}

fx_status fx_pretok_create(const char *name, struct fx_pretok **out,
                           struct fx_pretok_traits *traits, struct fx_error *err) {
    *out = NULL;
    const struct family *fam = find_family(name);
    if (!fam)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "tokenizer.ggml.pre '%s' is not a pre-tokenizer ferrox knows", name);
    struct fx_pretok *p = calloc(1, sizeof *p);
    if (!p)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (pre-tokenizer)");
    for (size_t i = 0; i < MAX_PATTERNS && fam->patterns[i]; i++) {
        int code;
        PCRE2_SIZE at;
        p->code[i] =
            pcre2_compile((PCRE2_SPTR)fam->patterns[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
        if (!p->code[i]) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(code, msg, sizeof msg);
            fx_pretok_free(p);
            return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                                "pre-tokenizer '%s' pattern %zu does not compile at %zu: %s", name,
                                i, (size_t)at, (const char *)msg);
        }
        /* Without JIT support PCRE2 interprets the pattern: slower, same result. */
        (void)pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE);
        p->n = i + 1;
    }
    *traits = fam->traits;
    *out = p;
    return FX_OK;
}

void fx_pretok_free(struct fx_pretok *p) {
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pcre2_code_free(p->code[i]);
    free(p);
}

struct split_ctx {
    const struct fx_pretok *p;
    pcre2_match_data *md;
    fx_pretok_emit_fn emit;
    void *user;
    struct fx_error *err;
};

/* Applies pattern `stage` to text[0..len) and hands every match and every gap to the next
 * stage; past the last pattern, a piece is a word. */
static fx_status split(struct split_ctx *c, size_t stage, const char *text, size_t len) {
    if (len == 0)
        return FX_OK;
    if (stage == c->p->n)
        return c->emit(c->user, text, len, c->err);
    fx_status st;
    size_t pos = 0; /* end of what has been handed on */
    size_t at = 0;  /* where the next search starts */
    while (at < len) {
        int rc = pcre2_match(c->p->code[stage], (PCRE2_SPTR)text, len, at, 0, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return fx_error_set(c->err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                                "pre-tokenizer pattern %zu failed on a %zu-byte piece: %s", stage,
                                len, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t start = ov[0], end = ov[1];
        if (end == start) {
            /* An empty match is a cut (SuperBPE's lookahead cuts digit runs into threes from the
             * right): hand on the text before it, and search again one character further. */
            if (start >= len)
                break;
            if ((st = split(c, stage + 1, text + pos, start - pos)) != FX_OK)
                return st;
            uint32_t cp;
            pos = start;
            at = start + fx_utf8_decode((const uint8_t *)text + start, len - start, &cp);
            continue;
        }
        if ((st = split(c, stage + 1, text + pos, start - pos)) != FX_OK)
            return st;
        if ((st = split(c, stage + 1, text + start, end - start)) != FX_OK)
            return st;
        pos = at = end;
    }
    return split(c, stage + 1, text + pos, len - pos);
}

fx_status fx_pretok_split(const struct fx_pretok *p, struct fx_tok_scratch *s, const char *text,
                          size_t len, fx_pretok_emit_fn emit, void *ctx, struct fx_error *err) {
    if (!s->match) {
        /* One pair is enough: only the whole match is read, and the patterns capture nothing. */
        s->match = pcre2_match_data_create(1, NULL);
        if (!s->match)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (match data)");
    }
    struct split_ctx c = {p, s->match, emit, ctx, err};
    return split(&c, 0, text, len);
}
