/* The Unicode character data the WordPiece tokenizer needs: general-category classes, white
 * space, simple lower-casing and accent stripping (the first code point of the canonical
 * decomposition). The tables are generated (tools/gen_unicode_tables.py, Unicode 14.0, the
 * version PCRE2 10.42 uses for the BPE pre-tokenizers). */
#ifndef FX_TOK_UNICODE_H
#define FX_TOK_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* General category classes (the first letter of the category); C includes unassigned points. */
enum fx_ucd_class {
    FX_UCD_LETTER = 1,
    FX_UCD_NUMBER = 2,
    FX_UCD_MARK = 4,
    FX_UCD_PUNCT = 8,
    FX_UCD_SYMBOL = 16,
    FX_UCD_SEPARATOR = 32,
    FX_UCD_CONTROL = 64,
};

struct fx_ucd_class_run {
    uint32_t start; /* the run lasts until the next run's start */
    uint8_t cls;
};
struct fx_ucd_pair {
    uint32_t cp, to;
};
struct fx_ucd_nfd_run {
    uint32_t first, last, base;
};

extern const struct fx_ucd_class_run fx_ucd_class_runs[];
extern const size_t fx_ucd_n_class_runs;
extern const struct fx_ucd_pair fx_ucd_lower[];
extern const size_t fx_ucd_n_lower;
extern const struct fx_ucd_nfd_run fx_ucd_nfd_runs[];
extern const size_t fx_ucd_n_nfd_runs;

/* The class of cp (FX_UCD_CONTROL past U+10FFFF). */
enum fx_ucd_class fx_ucd_class(uint32_t cp);
/* The Unicode White_Space property. */
bool fx_ucd_is_space(uint32_t cp);
/* The first code point of cp's lower-case mapping (cp itself when it has none). */
uint32_t fx_ucd_tolower(uint32_t cp);
/* The first code point of cp's NFD decomposition ('e' for 'é'; cp itself when it has none). */
uint32_t fx_ucd_nfd_base(uint32_t cp);

#endif
