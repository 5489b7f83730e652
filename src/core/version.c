#include "ferrox.h"

const char *fx_version(void) {
    return FX_VERSION;
}
