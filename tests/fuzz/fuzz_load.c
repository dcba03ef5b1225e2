/* fuzz_load.c — libFuzzer target over the three model loaders (Hugging Face config.json,
 * params.json, memplan model JSON) through plan_load_model_from_buffer, which reads memory only.
 * A loaded model must export and re-import to the same totals; a rejected one must come with a
 * message. Build and run with scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ModelSpec m, back;
    char msg[512];
    msg[0] = '\0';
    if (plan_load_model_from_buffer(&m, (const char *)data, size, "fuzz", msg, sizeof(msg))) {
        if (!msg[0] || m.layers || m.n_layers) abort();   /* a failure must say why, hold nothing */
        return 0;
    }
    char *js = NULL;
    if (plan_model_export_json(&m, &js)) abort();
    if (plan_load_model_from_buffer(&back, js, strlen(js), "fuzz-export", msg, sizeof(msg))) {
        fprintf(stderr, "re-import failed: %s\n%s\n", msg, js);
        abort();
    }
    if (plan_model_params(&back) != plan_model_params(&m) || back.n_layers != m.n_layers ||
        plan_model_buffers(&back) != plan_model_buffers(&m))
        abort();
    free(js);
    plan_model_free(&back);
    plan_model_free(&m);
    return 0;
}
