/* plan_report.h — a Plan for people (a table with a units row; non-data lines start with '#')
 * and for scripts (JSON, the contract in docs/json.md). Memory in binary GiB (2^30 B). */
#ifndef PLAN_REPORT_H
#define PLAN_REPORT_H

#include <stdio.h>
#include "plan_plan.h"

typedef struct cJSON cJSON;

/* The '#' lines that describe the setup: model, cluster, training, each dimension's lines (p: the
   plan's rows, for what depends on the strategy; NULL before planning). */
void plan_report_header(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p);
/* How much the table shows: wide, every column (max_batch, host, peak_at, the collectives' full
   labels); explain, the legends of the columns and of the time model. NULL: both. */
typedef struct {
    int wide;
    int explain;
} PlanReportStyle;
void plan_report_table(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       const Plan *p, const PlanReportStyle *st);
/* The verdict, one line: "fits: <pick>, peak .. of .. per GPU, headroom .., <rate>", or "does not
   fit: ..." (nothing leaves the safety margin: the row closest to fitting; the host; the smallest
   peak). The first line of the text output. */
void plan_report_verdict(FILE *f, const ModelSpec *m, const ClusterSpec *c, const Plan *p);
/* The whole plan as a JSON object (caller deletes it). NULL when out of memory. */
cJSON *plan_report_json(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p);
/* Each strategy's peak term by term, split by the rule that holds each byte (the mechanism and
   its source): --explain. docs/architecture.md. */
void plan_report_explain(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p);

#endif
