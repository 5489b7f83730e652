/* UTF-8 helpers that are not inline (see utf8.h). */
#include "tok/utf8.h"

#include <stdbool.h>

/* Whether byte c may follow `lead` as the continuation at position pos (1 = the second byte):
 * the second byte is narrowed for E0/ED/F0/F4 so that overlong forms, surrogates and code points
 * past U+10FFFF are never held back as "incomplete". */
static bool continues(uint8_t lead, size_t pos, uint8_t c) {
    if ((c & 0xC0) != 0x80)
        return false;
    if (pos != 1)
        return true;
    switch (lead) {
    case 0xE0:
        return c >= 0xA0;
    case 0xED:
        return c <= 0x9F;
    case 0xF0:
        return c >= 0x90;
    case 0xF4:
        return c <= 0x8F;
    default:
        return true;
    }
}

size_t fx_utf8_incomplete_tail(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t lead = u[n - k];
        if ((lead & 0xC0) == 0x80)
            continue;
        size_t need = lead >= 0xC2 && lead <= 0xDF   ? 2
                      : lead >= 0xE0 && lead <= 0xEF ? 3
                      : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                     : 0;
        if (need == 0 || k >= need)
            return 0;
        for (size_t i = 1; i < k; i++)
            if (!continues(lead, i, u[n - k + i]))
                return 0;
        return k;
    }
    return 0;
}
