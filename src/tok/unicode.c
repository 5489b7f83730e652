/* Lookups in the generated Unicode tables (unicode_tables.c): binary searches over sorted runs. */
#include "tok/unicode.h"

enum fx_ucd_class fx_ucd_class(uint32_t cp) {
    if (cp > 0x10FFFF)
        return FX_UCD_CONTROL;
    /* The last run whose start is <= cp; the first run starts at 0. */
    size_t lo = 0, hi = fx_ucd_n_class_runs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (fx_ucd_class_runs[mid].start <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (enum fx_ucd_class)fx_ucd_class_runs[lo].cls;
}

bool fx_ucd_is_space(uint32_t cp) {
    switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

uint32_t fx_ucd_tolower(uint32_t cp) {
    size_t lo = 0, hi = fx_ucd_n_lower;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fx_ucd_lower[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < fx_ucd_n_lower && fx_ucd_lower[lo].cp == cp ? fx_ucd_lower[lo].to : cp;
}

uint32_t fx_ucd_nfd_base(uint32_t cp) {
    size_t lo = 0, hi = fx_ucd_n_nfd_runs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fx_ucd_nfd_runs[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < fx_ucd_n_nfd_runs && fx_ucd_nfd_runs[lo].first <= cp)
        return fx_ucd_nfd_runs[lo].base;
    return cp;
}
