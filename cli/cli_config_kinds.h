/* cli_config_kinds.h — the four kinds of config cli_config.c reads: how each is recognised, which
 * of its keys are honoured, have no effect or are not modelled (tables), and how the honoured
 * ones map onto memplan's flags. The source of every row: docs/configs.md. */
#ifndef CLI_CONFIG_KINDS_H
#define CLI_CONFIG_KINDS_H

#include "cli_config_doc.h"

/* The kind a parsed document is (fmt: how it parsed), or -1 if none recognises it. */
int cfg_kind_detect(const cJSON *doc, DocFormat fmt);
/* The format a kind's files are in (accelerate also writes JSON: YAML reads it too). */
DocFormat cfg_kind_format(CfgKind k);
/* Maps doc onto c's settings and warnings: the keys it has, then the framework's defaults for
 * the flags it leaves out. 0, or -1 with one line in c->err. */
int cfg_kind_read(Cfg *c, CfgKind k, const cJSON *doc);

#endif
