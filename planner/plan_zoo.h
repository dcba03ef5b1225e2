/* plan_zoo.h — the built-in models, built from their architecture configs (Hugging Face /
 * torchvision shapes). Counts are computed from the shapes, never typed in as totals. */
#ifndef PLAN_ZOO_H
#define PLAN_ZOO_H

#include "plan_model.h"

typedef struct {
    const char *name;
    const char *family;       /* "gpt2", "llama2", "bert", "resnet" */
    const char *reference;    /* the implementation whose parameter count it reproduces */
} ZooEntry;

int plan_zoo_count(void);
const ZooEntry *plan_zoo_entry(int i);
int plan_zoo_has(const char *name);   /* 1 if name is a zoo model */
/* Builds the named model. -1 with "unknown model 'x' (valid: ...)" in msg if not in the zoo. */
int plan_zoo_build(ModelSpec *m, const char *name, char *msg, size_t msglen);
/* Comma-separated names, for error messages and --help. */
const char *plan_zoo_names(void);

/* ResNet (torchvision) from stage depths; bottleneck = 1 for ResNet-50/101/152. Each conv and
 * each BatchNorm is one layer with its saved activations per sample at image_size. */
int plan_model_resnet(ModelSpec *m, const char *name, const int depths[4], int bottleneck,
                      int width, int image_size, int classes, char *msg, size_t msglen);

#endif
