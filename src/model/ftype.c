#include "model/ftype.h"

#include <stddef.h>
#include <strings.h>

/* llama.cpp's llama_ftype values (ids that it retired are absent). */
static const struct {
    uint32_t id;
    const char *name;
} names[] = {
    {0, "F32"},     {1, "F16"},     {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},
    {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},      {11, "Q3_K_S"}, {12, "Q3_K_M"},
    {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"},    {16, "Q5_K_S"}, {17, "Q5_K_M"},
    {18, "Q6_K"},   {32, "BF16"},   {38, "MXFP4_MOE"},
};

const char *fx_file_type_name(uint32_t id) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == id)
            return names[i].name;
    return NULL;
}

bool fx_file_type_from_name(const char *name, uint32_t *id) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(names[i].name, name) == 0) {
            *id = names[i].id;
            return true;
        }
    return false;
}
