/* plan_report.c — see plan_report.h. */
#include "plan_report.h"
#include "plan_dim_ft.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "plan_fsdp.h"
#include "plan_dim_offload.h"
#include "plan_step.h"
#include "plan_time.h"
#include "plan_dim_pp.h"
#include "plan_dim_tp.h"
#include "plan_util.h"

static int64_t plan_report_seq(const ModelSpec *m, const TrainSpec *t) {
    return t->seq > 0 ? t->seq : m->max_seq;
}

static double plan_report_dropout(const ModelSpec *m, const TrainSpec *t) {
    return t->dropout >= 0 ? t->dropout : m->dropout;
}

void plan_report_header(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p) {
    char a[32], b[32];
    const Step *rows[STRAT_COUNT];
    int n_rows = p ? p->n_rows : 0;
    if (p) plan_steps(p, rows);
    fprintf(f, "# model: %s (%s parameters, %s, %d layers; from %s)\n", m->name,
            plan_fmt_count(plan_model_params(m) + plan_model_frozen(m), a, sizeof(a)), plan_arch_name(m->arch),
            m->n_layers, m->source);
    plan_dims_header(f, HEADER_AFTER_MODEL, m, t, c, rows, n_rows);
    if (m->headless)
        fprintf(f, "# %s is a base model (no LM head): no logits and no loss are planned; training "
                "it needs a loss on its last hidden state, which the caller holds through backward\n",
                m->name);
    fprintf(f, "# cluster: %lld x %s (%s, %s each), %lld GPUs per node, %lld node%s\n",
            (long long)c->gpus, c->gpu.name, c->gpu.label,
            plan_fmt_bytes(c->gpu.mem_bytes, b, sizeof(b)), (long long)c->gpus_per_node,
            (long long)plan_cluster_nodes(c), plan_cluster_nodes(c) > 1 ? "s" : "");
    fprintf(f, "# train: micro-batch %lld, seq %lld, grad-accum %lld, precision %s, optimizer %s, "
            "act-ckpt %s, attn %s, dropout %g, fsdp rows: %s%s%s%s%s\n", (long long)t->micro_batch,
            (long long)plan_report_seq(m, t), (long long)t->grad_accum,
            plan_precision(t->precision)->name, plan_optimizer(t->optimizer)->name,
            plan_ckpt_label(t, (char[24]){0}, 24), plan_attn_label(t), plan_report_dropout(m, t),
            t->fsdp_impl == 1 ? "FSDP1 (flat parameter)" : "FSDP2 (fully_shard)",
            t->fsdp_reduce == FSDP_REDUCE_LOW ? " reducing in the 16-bit dtype (--fsdp-reduce-dtype)"
            : t->fsdp_reduce == FSDP_REDUCE_FP32 ? " reducing in fp32 (--fsdp-reduce-dtype)" : "",
            t->grad_accum > 1 ? " reducing gradients " : "",
            t->grad_accum > 1 ? (t->fsdp_grad_sync == FSDP_SYNC_LAST ? "in the last micro-step only (--fsdp-grad-sync last)"
                                                                     : "every micro-step (--fsdp-grad-sync every)") : "",
            t->impl == IMPL_ENGINE ? ", activation layout: memplan engine" : "");
    if (t->fsdp_impl == 1)   /* FSDP1's knobs (docs/formulas.md "FSDP1 and its knobs") */
        fprintf(f, "# fsdp1: units %s, backward_prefetch %s, forward_prefetch %s, limit_all_gathers %s\n",
                t->fsdp1.min_params > 0 ? (m->root_only ? "everything in the root (size-based wrapping)"
                                                        : "from size-based wrapping (--fsdp-min-params)")
                                        : "the blocks", plan_fsdp_bwd_name(t->fsdp1.bwd), t->fsdp1.fwd ? "on" : "off",
                t->fsdp1.no_limit ? "off (planned as on)" : "on");
    plan_dims_header(f, HEADER_AFTER_TRAIN, m, t, c, rows, n_rows);
}

/* How the times were made and what backs them: the flat model or per operation, and per strategy
   the published sources whose runs cover its setup with their held-out error, or an estimate
   (plan_time.h); strategies with the same basis share a line. */
static void time_basis_lines(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p,
                             const PlanReportStyle *st) {
    if (plan_time_flat(c))   /* said always: the times are not the default model's */
        fprintf(f, "# compute at %.0f%% of the preset's peak FLOP/s (--mfu: the flat model), collectives at the links' "
                   "alpha-beta\n", c->mfu * 100);
    else if (st->explain)
        fprintf(f, "# compute from the operations: GEMMs at the GPU's measured GEMM rate less tile and wave quantization, "
                   "attention by its kernel, elementwise passes at HBM bandwidth; collectives by NCCL's ring/tree model "
                   "(docs/formulas.md \"Time\"; --mfu F for the flat model)\n");
    char text[STRAT_COUNT][320];
    int done[STRAT_COUNT] = {0};
    for (int i = 0; i < p->n_rows && i < STRAT_COUNT; i++) {
        TimeBasis b = plan_time_basis(m, t, c, p->rows[i].kind);
        plan_time_basis_text(&b, text[i], sizeof text[i]);
    }
    for (int i = 0; i < p->n_rows && i < STRAT_COUNT; i++) {
        if (done[i]) continue;
        char names[128] = "";
        size_t n = 0;
        for (int j = i; j < p->n_rows && j < STRAT_COUNT; j++)
            if (!done[j] && strcmp(text[j], text[i]) == 0) {
                done[j] = 1;
                n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, "%s%s", n ? ", " : "",
                                      plan_strategy(p->rows[j].kind)->name);
            }
        fprintf(f, "# times of %s: %s\n", names, text[i]);
    }
}

/* How much of a label fits in room columns: whole, or cut before room - 3 for "...". */
static int cut(const char *what, int room) {
    int n = (int)strlen(what);
    return n <= room ? n : room > 3 ? room - 3 : 0;
}

/* The collective table (and, under accumulation, what FSDP's other style would change). */
static void comm_table(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p,
                       const PlanReportStyle *st) {
    fprintf(f, "# communication per GPU per optimizer step%s\n", st->explain ? " (payload = full buffer; wire = nccl-tests "
               "factors: all-reduce 2(n-1)/n, reduce-scatter/all-gather (n-1)/n)" : "");
    if (plan_model_frozen(m) > 0) {
        char a[32], b[32];
        fprintf(f, "# gradient reductions (and ZeRO-1/2's step all-gather) carry the %s trainable parameters only: the %s "
                "frozen ones are never reduced; FSDP's and ZeRO-3's parameter all-gathers move every parameter\n",
                plan_fmt_count(plan_model_params(m), a, sizeof a), plan_fmt_count(plan_model_frozen(m), b, sizeof b));
    }
    /* 100 columns: 12 + 15 + 9 + 6 + 9 + 9 + 6 + 9 + 2, the label cut to the rest (--wide: whole) */
    int nw = st->wide ? 13 : 12, cw = st->wide ? 8 : 5, bw = st->wide ? 10 : 8, rw = st->wide ? 6 : 5, tw = st->wide ? 9 : 8;
    int room = st->wide ? 1 << 20 : 100 - (nw + 15 + 9 + (cw + 1) + 2 * (bw + 1) + (rw + 1) + (tw + 1) + 2);
    fprintf(f, "%-*s %-14s %-8s %*s %*s %*s %*s %*s  %s\n", nw, "strategy", "collective", "phase",
            cw, "count", bw, "payload", bw, "wire", rw, "ranks", tw, "time", "what");
    fprintf(f, "%-*s %-14s %-8s %*s %*s %*s %*s %*s  %s\n", nw, "-", "-", "-", cw, "calls", bw, "GiB", bw, "GiB",
            rw, "-", tw, "ms", "-");
    for (int i = 0; i < p->n_rows; i++) {
        const StrategyPlan *r = &p->rows[i];
        if (r->comm.n == 0)
            fprintf(f, "%-*s %-14s\n", nw, plan_strategy(r->kind)->name, "none (one rank)");
        for (int k = 0; k < r->comm.n; k++) {
            const PlanColl *x = &r->comm.c[k];
            fprintf(f, "%-*s %-14s %-8s %*.0f %*.3f %*.3f %*lld %*.2f  %.*s%s\n", nw,
                    plan_strategy(r->kind)->name, coll_name(x->op), phase_name(x->phase),
                    cw, x->count, bw, x->payload_bytes / GIB, bw, x->wire_bytes / GIB, rw, (long long)x->group,
                    tw, x->seconds * 1e3, cut(x->what, room), x->what, (int)strlen(x->what) > room ? "..." : "");
        }
        for (int k = 0; k < r->comm.n_host; k++) {   /* CPU offload: PCIe, not the network */
            const PlanHostCopy *x = &r->comm.host[k];
            fprintf(f, "%-*s %-14s %-8s %*s %*.3f %*s %*s %*.2f  %.*s%s\n", nw, plan_strategy(r->kind)->name,
                    x->name, phase_name(x->phase), cw, "-", bw, x->bytes / GIB, bw, "-", rw, "host",
                    tw, x->seconds * 1e3, cut(x->what, room), x->what, (int)strlen(x->what) > room ? "..." : "");
        }
    }
    if (t->grad_accum > 1) {   /* FSDP's other style under accumulation (--fsdp-grad-sync) */
        int last = t->fsdp_grad_sync == FSDP_SYNC_LAST;
        for (int i = 0; i < p->n_rows; i++) {
            StrategyKind k = p->rows[i].kind;
            if (k != STRAT_FSDP_FULL && k != STRAT_FSDP_GRAD_OP && k != STRAT_FSDP_HYBRID) continue;
            double extra, saved;
            plan_fsdp_no_sync(&p->rows[i].step, &extra, &saved);
            if (last)
                fprintf(f, "# %s reduces in the last micro-step only (--fsdp-grad-sync last): %.3f GiB more unsharded "
                        "gradients per GPU than every micro-step (every), %.3f GiB less reduce-scatter traffic per step\n",
                        plan_strategy(k)->name, extra / GIB, saved / GIB);
            else
                fprintf(f, "# %s with no_sync on the %lld accumulation micro-steps (--fsdp-grad-sync last): +%.3f GiB of "
                        "unsharded gradients per GPU, %.3f GiB less reduce-scatter traffic per step\n",
                        plan_strategy(k)->name, (long long)t->grad_accum - 1, extra / GIB, saved / GIB);
        }
    }
}

void plan_report_verdict(FILE *f, const ModelSpec *m, const ClusterSpec *c, const Plan *p) {
    char a[32], b[32], d[32];
    if (p->recommended >= 0) {
        const StrategyPlan *r = &p->rows[p->recommended];
        char rate[64] = "";
        if (r->mem.acts_known)
            snprintf(rate, sizeof rate, ", %.0f %s/s", r->time.tokens_per_s, m->arch == ARCH_CNN ? "samples" : "tokens");
        fprintf(f, "fits: %s, peak %s of %s per GPU, headroom %s%s\n", plan_strategy(r->kind)->name,
                plan_fmt_bytes(r->mem.peak, a, sizeof a), plan_fmt_bytes(c->gpu.mem_bytes, b, sizeof b),
                plan_fmt_bytes(r->mem.headroom, d, sizeof d), rate);
        return;
    }
    int fit = -1, host = -1, li = 0;
    for (int i = 0; i < p->n_rows; i++) {
        const MemResult *x = &p->rows[i].mem;
        if (x->fits && (fit < 0 || x->headroom > p->rows[fit].mem.headroom)) fit = i;
        if (x->gpu_fits && !x->host_fits && host < 0) host = i;
        if (x->peak < p->rows[li].mem.peak) li = i;
    }
    if (!p->n_rows) return;
    if (fit >= 0)
        fprintf(f, "does not fit with the %s safety margin: %s peaks at %s of %s per GPU, headroom %s\n",
                plan_fmt_bytes(p->margin, a, sizeof a), plan_strategy(p->rows[fit].kind)->name,
                plan_fmt_bytes(p->rows[fit].mem.peak, b, sizeof b), plan_fmt_bytes(c->gpu.mem_bytes, d, sizeof d),
                plan_fmt_bytes(p->rows[fit].mem.headroom, (char[32]){0}, 32));
    else if (host >= 0)
        fprintf(f, "does not fit in host memory: %s fits the GPU (peak %s) but needs %s per node, %s available\n",
                plan_strategy(p->rows[host].kind)->name, plan_fmt_bytes(p->rows[host].mem.peak, a, sizeof a),
                plan_fmt_bytes(p->rows[host].mem.host_per_node, b, sizeof b),
                plan_fmt_bytes(p->rows[host].mem.host_capacity, d, sizeof d));
    else
        fprintf(f, "does not fit: the smallest peak is %s (%s) of %s per GPU\n", plan_fmt_bytes(p->rows[li].mem.peak, a, sizeof a),
                plan_strategy(p->rows[li].kind)->name, plan_fmt_bytes(c->gpu.mem_bytes, b, sizeof b));
}

void plan_report_table(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       const Plan *p, const PlanReportStyle *st) {
    static const PlanReportStyle FULL = {1, 1};
    if (!st) st = &FULL;
    char buf[TERM_COUNT + 4][24];
    int w = st->wide ? 8 : 7, nw = st->wide ? 13 : 12;   /* 100 columns: 12 + 9 x 8 + 5 + 9 */
    plan_report_header(f, m, t, c, p);
    fprintf(f, "# memory per GPU at each strategy's peak moment; terms add up to the peak%s\n",
            st->wide ? "" : " (--wide: max_batch, host, peak_at)");
    fprintf(f, "%-*s %*s %*s %*s %*s %*s %*s %*s %*s %-4s %*s", nw, "strategy", w, "params", w, "grads", w, "comm", w,
            "optim", w, "activ", w, "transnt", w, st->wide ? "overhead" : "overhd", w, "peak", "fits", w + 1, "headroom");
    if (st->wide) fprintf(f, " %9s %8s  %s", "max_batch", "host", "peak_at");
    fprintf(f, "\n%-*s %*s %*s %*s %*s %*s %*s %*s %*s %-4s %*s", nw, "-", w, "GiB", w, "GiB", w, "GiB", w, "GiB", w,
            "GiB", w, "GiB", w, "GiB", w, "GiB", "-", w + 1, "GiB");
    if (st->wide) fprintf(f, " %9s %8s  %s", "samples", "GiB/node", "-");
    fputc('\n', f);
    for (int i = 0; i < p->n_rows; i++) {
        const StrategyPlan *r = &p->rows[i];
        fprintf(f, "%-*s", nw, plan_strategy(r->kind)->name);
        for (int k = 0; k < TERM_COUNT; k++) {
            if (k == TERM_ACTIVATIONS && !r->mem.acts_known) fprintf(f, " %*s", w, "unknown");
            else fprintf(f, " %*s", w, plan_fmt_gib(r->mem.term[k], buf[k], sizeof(buf[k])));
        }
        fprintf(f, " %*s %-4s %*s", w, plan_fmt_gib(r->mem.peak, buf[TERM_COUNT], 24),
                r->mem.fits ? "yes" : !r->mem.gpu_fits ? "OOM" : "host", w + 1,
                plan_fmt_gib(r->mem.headroom, buf[TERM_COUNT + 1], 24));
        if (st->wide) {
            char mb[24];   /* without activations the batch that fits is not known: no figure */
            if (r->mem.acts_known) snprintf(mb, sizeof(mb), "%lld", (long long)r->max_micro_batch);
            else snprintf(mb, sizeof(mb), "%s", r->max_micro_batch > 0 ? "unknown" : "0");
            fprintf(f, " %9s %8s  %s", mb, plan_fmt_gib(r->mem.host_per_node, buf[TERM_COUNT + 2], 24), r->mem.peak_where);
        }
        fputc('\n', f);
    }
    for (int i = 0; i < p->n_rows; i++) {
        const StrategyPlan *r = &p->rows[i];
        char a[32], b[32];
        if (r->mem.gpu_fits && !r->mem.host_fits)
            fprintf(f, "# %s does not fit in host memory: needs %s per node, %s available (--host-mem)\n",
                    plan_strategy(r->kind)->name, plan_fmt_bytes(r->mem.host_per_node, a, sizeof(a)),
                    plan_fmt_bytes(r->mem.host_capacity, b, sizeof(b)));
    }
    if (st->explain)
        fprintf(f, "# host = host memory per node: offloaded model states of the node's GPUs, or the copies made "
                   "while loading, whichever is larger (x1.5 for DeepSpeed, its estimator's buffer factor)\n");
    if (p->n_rows) {
        const MemResult *r0 = &p->rows[0].mem;
        char a[32], b[32], d[32], e[32];
        fprintf(f, "# overhead = CUDA context %s + cuBLAS workspace %s + NCCL %s (%d communicator%s) + ",
                plan_fmt_bytes(r0->cuda_context, a, sizeof(a)), plan_fmt_bytes(r0->cublas_ws, b, sizeof(b)),
                plan_fmt_bytes(r0->nccl, d, sizeof(d)), r0->nccl_comms, r0->nccl_comms == 1 ? "" : "s");
        if (c->alloc_model) {
            char conf[256];
            plan_alloc_config_describe(&c->alloc_conf, conf, sizeof conf);
            fprintf(f, "allocator: the step's allocations replayed through PyTorch's caching allocator (%s; "
                    "docs/formulas.md \"The allocator in the plan\"), what the step needs of it (the least "
                    "memory with which two steps succeed, the same on any GPU) - tensor peak:", conf);
            for (int i = 0; i < p->n_rows; i++) {
                const MemResult *m0 = &p->rows[i].mem;
                if (!m0->alloc_model) { fprintf(f, "%s %s flat 5%%", i ? "," : "", plan_strategy(p->rows[i].kind)->name); continue; }
                fprintf(f, "%s %s %s (%.1f%%)", i ? "," : "", plan_strategy(p->rows[i].kind)->name,
                        plan_fmt_bytes(m0->margin, e, sizeof(e)),
                        m0->alloc_tensor_peak > 0 ? 100 * m0->margin / m0->alloc_tensor_peak : 0.0);
            }
            fprintf(f, "\n");
        } else if (c->margin_is_frac) {
            fprintf(f, "allocator margin (%g%% of allocated)\n", c->alloc_margin * 100);
        } else {
            fprintf(f, "allocator margin (fixed at %s)\n", plan_fmt_bytes(c->alloc_margin, e, sizeof(e)));
        }
        if (!r0->acts_known)
            fprintf(f, "# activations unknown for this model (no architecture or measurement): "
                    "peaks exclude them; give activation_bytes_per_sample in a params.json\n");
        int fsdp2 = 0;   /* an fsdp-* row that FSDP2 pads per tensor's dim 0 */
        for (int i = 0; i < p->n_rows; i++) fsdp2 |= plan_fsdp2_dim0_rows(t, p->rows[i].kind);
        if (fsdp2 && c->gpus > 1 && !plan_model_dim0_known(m))
            fprintf(f, "# fsdp rows: FSDP2 pads each parameter's dim 0, but this model's tensor shapes are "
                    "unknown: its shards are padded per unit instead (exact where the shard group divides "
                    "every dim 0)\n");
    }
    comm_table(f, m, t, c, p, st);
    const char *unit = m->arch == ARCH_CNN ? "samples/s" : "tokens/s";
    fprintf(f, "# simulated step: every GPU runs the same step, so times and comm are per GPU; throughput per GPU "
               "and for all %lld GPUs%s\n", (long long)c->gpus,
            st->explain ? " (DDP buckets overlap backward, FSDP/ZeRO-3 prefetch one unit)" : "");
    time_basis_lines(f, m, t, c, p, st);
    if (plan_pp_degree(t) > 1)
        fprintf(f, "# step includes the pipeline bubble, (pp - 1) / (V M) of the micro-steps (V: stages per rank; "
                "docs/formulas.md \"Pipeline parallel\"); exposed is communication only\n");
    fprintf(f, "%-*s %10s %10s %10s %10s %12s %12s %10s\n", nw, "strategy", "compute", "comm", "exposed",
            "step", "per_gpu", "all_gpus", "comm/GPU");
    fprintf(f, "%-*s %10s %10s %10s %10s %12s %12s %10s\n", nw, "-", "ms", "ms", "ms", "ms", unit, unit, "GiB");
    for (int i = 0; i < p->n_rows; i++) {
        const StrategyPlan *r = &p->rows[i];
        char tg[24], ta[24];   /* without the architecture, tokens per step are not modelled */
        snprintf(tg, sizeof(tg), r->mem.acts_known ? "%.0f" : "unknown", r->time.tokens_per_s / (double)c->gpus);
        snprintf(ta, sizeof(ta), r->mem.acts_known ? "%.0f" : "unknown", r->time.tokens_per_s);
        fprintf(f, "%-*s %10.2f %10.2f %10.2f %10.2f %12s %12s %10.3f\n", nw, plan_strategy(r->kind)->name,
                r->time.compute_s * 1e3, r->time.comm_s * 1e3, r->time.exposed_comm_s * 1e3,
                r->time.step_s * 1e3, tg, ta, r->comm.wire_bytes / GIB);
    }
}

/* The bytes each rule holds at a row's peak, per term (rule x term), from its step; -1 when the
   step could not be built. */
static int peak_by_rule(const StrategyPlan *r, const ClusterSpec *c, double out[RULE_COUNT][TERM_COUNT]) {
    if (r->step.failed) return -1;
    plan_step_live_at_peak(&r->step, c, out);
    return 0;
}

/* "peak_by_rule": the bytes each rule holds at the peak, per term (they add up to the term). */
static void add_peak_by_rule(cJSON *o, const StrategyPlan *r, const ClusterSpec *c, unsigned char used[RULE_COUNT]) {
    static double by[RULE_COUNT][TERM_COUNT];
    if (peak_by_rule(r, c, by)) return;
    cJSON *arr = cJSON_AddArrayToObject(o, "peak_by_rule");
    for (int j = 0; j < TERM_COUNT; j++)
        for (int q = 0; q < RULE_COUNT; q++) {
            if (j == TERM_OVERHEAD || fabs(by[q][j]) < 0.5) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "term", plan_term_name((TermKind)j));
            cJSON_AddStringToObject(e, "rule", plan_rule_info((RuleId)q)->name);
            cJSON_AddNumberToObject(e, "bytes", by[q][j]);
            cJSON_AddItemToArray(arr, e);
            used[q] = 1;
        }
}

/* One strategy's record (docs/json.md "strategies"). */
static void strategy_json(cJSON *js, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const StrategyPlan *r,
                          unsigned char used[RULE_COUNT]) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(js, o);
    cJSON_AddStringToObject(o, "name", plan_strategy(r->kind)->name);
    cJSON_AddStringToObject(o, "label", plan_strategy(r->kind)->label);
    cJSON_AddBoolToObject(o, "fits", r->mem.fits);
    cJSON_AddBoolToObject(o, "gpu_fits", r->mem.gpu_fits);
    cJSON_AddBoolToObject(o, "host_fits", r->mem.host_fits);
    cJSON_AddNumberToObject(o, "host_bytes_per_node", r->mem.host_per_node);
    if (r->mem.acts_known || r->max_micro_batch == 0) cJSON_AddNumberToObject(o, "max_micro_batch", (double)r->max_micro_batch);
    else cJSON_AddNullToObject(o, "max_micro_batch");   /* fits, but how many samples is unknown */
    plan_dims_row_json(o, &r->step);   /* e.g. the pipeline stage the memory is of */
    cJSON_AddNumberToObject(o, "model_states_bytes", r->mem.model_states);
    cJSON_AddNumberToObject(o, "headroom_bytes", r->mem.headroom);
    cJSON_AddStringToObject(o, "peak_phase", phase_name(r->mem.peak_phase));
    cJSON_AddStringToObject(o, "peak_at", r->mem.peak_where);
    cJSON_AddBoolToObject(o, "activations_known", r->mem.acts_known);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    for (int k = 0; k < TERM_COUNT; k++)
        cJSON_AddNumberToObject(mem, plan_term_name((TermKind)k), r->mem.term[k]);
    cJSON_AddNumberToObject(mem, "peak", r->mem.peak);
    cJSON *ov = cJSON_AddObjectToObject(o, "overhead_detail");
    cJSON_AddNumberToObject(ov, "cuda_context", r->mem.cuda_context);
    cJSON_AddNumberToObject(ov, "cublas_workspace", r->mem.cublas_ws);
    cJSON_AddNumberToObject(ov, "nccl", r->mem.nccl);
    cJSON_AddNumberToObject(ov, "allocator_margin", r->mem.margin);
    cJSON_AddStringToObject(ov, "allocator_margin_from", r->mem.alloc_model ? "caching_allocator_model"
                            : c->margin_is_frac ? "fraction" : "fixed");
    if (r->mem.alloc_model) {
        char conf[256];
        plan_alloc_config_describe(&c->alloc_conf, conf, sizeof conf);
        cJSON *al = cJSON_AddObjectToObject(ov, "allocator");
        cJSON_AddStringToObject(al, "settings", conf);
        cJSON_AddNumberToObject(al, "tensor_peak", r->mem.alloc_tensor_peak);
        cJSON_AddNumberToObject(al, "max_allocated", r->mem.alloc_allocated);
        cJSON_AddNumberToObject(al, "need", r->mem.alloc_need);
        cJSON_AddNumberToObject(al, "max_reserved", r->mem.alloc_reserved);
        cJSON_AddNumberToObject(al, "segments", r->mem.alloc_segments);
        cJSON_AddNumberToObject(al, "limit", r->mem.alloc_limit);
        if (r->mem.alloc_oom) cJSON_AddNullToObject(al, "reserved_at_limit");
        else cJSON_AddNumberToObject(al, "reserved_at_limit", r->mem.alloc_reserved_at_limit);
        cJSON *steps = cJSON_AddArrayToObject(al, "reserved_after_step");
        for (int k = 0; k < 2; k++) cJSON_AddItemToArray(steps, cJSON_CreateNumber(r->mem.alloc_step_reserved[k]));
        cJSON_AddBoolToObject(al, "out_of_memory", r->mem.alloc_oom);
    }
    cJSON *cm = cJSON_AddObjectToObject(o, "comm");
    cJSON_AddNumberToObject(cm, "bytes_per_gpu", r->comm.wire_bytes);
    cJSON_AddNumberToObject(cm, "seconds", r->comm.seconds);
    cJSON *cl = cJSON_AddArrayToObject(cm, "collectives");
    for (int k = 0; k < r->comm.n; k++) {
        const PlanColl *x = &r->comm.c[k];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", coll_name(x->op));
        cJSON_AddStringToObject(e, "phase", phase_name(x->phase));
        cJSON_AddStringToObject(e, "what", x->what);
        cJSON_AddNumberToObject(e, "count", x->count);
        cJSON_AddNumberToObject(e, "payload_bytes", x->payload_bytes);
        cJSON_AddNumberToObject(e, "wire_bytes_per_gpu", x->wire_bytes);
        cJSON_AddNumberToObject(e, "ranks", (double)x->group);
        cJSON_AddNumberToObject(e, "seconds", x->seconds);
        cJSON_AddItemToArray(cl, e);
    }
    cJSON_AddNumberToObject(cm, "host_bytes_per_gpu", r->comm.host_bytes);
    cJSON_AddNumberToObject(cm, "host_seconds", r->comm.host_seconds);
    cJSON *hc = cJSON_AddArrayToObject(cm, "host_copies");
    for (int k = 0; k < r->comm.n_host; k++) {
        const PlanHostCopy *x = &r->comm.host[k];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", x->name);
        cJSON_AddStringToObject(e, "phase", phase_name(x->phase));
        cJSON_AddStringToObject(e, "what", x->what);
        cJSON_AddNumberToObject(e, "bytes_per_gpu", x->bytes);
        cJSON_AddNumberToObject(e, "seconds", x->seconds);
        cJSON_AddItemToArray(hc, e);
    }
    if (t->grad_accum > 1 && (r->kind == STRAT_FSDP_FULL || r->kind == STRAT_FSDP_GRAD_OP ||
                              r->kind == STRAT_FSDP_HYBRID)) {
        double extra, saved;
        plan_fsdp_no_sync(&r->step, &extra, &saved);
        cJSON *ns = cJSON_AddObjectToObject(o, "no_sync");
        cJSON_AddNumberToObject(ns, "extra_memory_bytes", extra);
        cJSON_AddNumberToObject(ns, "wire_bytes_saved_per_gpu", saved);
    }
    cJSON *tm = cJSON_AddObjectToObject(o, "time");
    TimeBasis tb = plan_time_basis(m, t, c, r->kind);   /* the simulated step, not a measurement */
    cJSON_AddStringToObject(tm, "basis", plan_time_basis_name(&tb));
    cJSON_AddStringToObject(tm, "basis_why", tb.why);
    cJSON_AddNumberToObject(tm, "mfu", plan_time_mfu(c, t, r->time.flops_per_step, r->time.step_s));
    cJSON_AddNumberToObject(tm, "compute_s", r->time.compute_s);
    cJSON_AddNumberToObject(tm, "comm_s", r->time.comm_s);
    cJSON_AddNumberToObject(tm, "exposed_comm_s", r->time.exposed_comm_s);
    if (r->time.pp_bubble_s > 0) cJSON_AddNumberToObject(tm, "pp_bubble_s", r->time.pp_bubble_s);   /* --pp only */
    cJSON_AddNumberToObject(tm, "step_s", r->time.step_s);
    cJSON_AddNumberToObject(tm, "tokens_per_s", r->time.tokens_per_s);   /* all GPUs */
    cJSON_AddNumberToObject(tm, "tokens_per_s_per_gpu", r->time.tokens_per_s / (double)c->gpus);
    cJSON_AddNumberToObject(tm, "flops_per_gpu", r->time.flops_per_step);
    cJSON *ph = cJSON_AddObjectToObject(o, "phase_peaks");
    for (int k = 0; k < PHASE_COUNT; k++)
        cJSON_AddNumberToObject(ph, phase_name((PhaseKind)k), r->mem.phase_peak[k]);
    add_peak_by_rule(o, r, c, used);
}

cJSON *plan_report_json(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p) {
    unsigned char used[RULE_COUNT] = {0};
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *jm = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(jm, "name", m->name);
    cJSON_AddNumberToObject(jm, "params", (double)(plan_model_params(m) + plan_model_frozen(m)));
    cJSON_AddNumberToObject(jm, "active_params", (double)plan_model_active_params(m));
    cJSON_AddStringToObject(jm, "arch", plan_arch_name(m->arch));
    cJSON_AddNumberToObject(jm, "layers", m->n_layers);
    cJSON_AddStringToObject(jm, "source", m->source);
    cJSON_AddBoolToObject(jm, "has_loss", !m->headless);   /* base classes: no head, no loss */
    cJSON *jc = cJSON_AddObjectToObject(root, "cluster");
    cJSON_AddStringToObject(jc, "gpu", c->gpu.name);
    cJSON_AddNumberToObject(jc, "gpus", (double)c->gpus);
    cJSON_AddNumberToObject(jc, "gpus_per_node", (double)c->gpus_per_node);
    cJSON_AddNumberToObject(jc, "gpu_mem_bytes", c->gpu.mem_bytes);
    cJSON_AddNumberToObject(jc, "host_mem_bytes_per_node", plan_cluster_host_mem(c));
    cJSON_AddNumberToObject(jc, "host_bw_gbps", c->gpu.host_bw);
    cJSON *jt = cJSON_AddObjectToObject(root, "train");
    cJSON_AddNumberToObject(jt, "micro_batch", (double)t->micro_batch);
    cJSON_AddNumberToObject(jt, "seq", (double)plan_report_seq(m, t));
    cJSON_AddNumberToObject(jt, "grad_accum", (double)t->grad_accum);
    cJSON_AddStringToObject(jt, "precision", plan_precision(t->precision)->name);
    cJSON_AddStringToObject(jt, "optimizer", plan_optimizer(t->optimizer)->name);
    cJSON_AddStringToObject(jt, "act_ckpt", plan_ckpt_label(t, (char[24]){0}, 24));
    cJSON_AddStringToObject(jt, "attn", plan_attn_name(t->attn));
    cJSON_AddStringToObject(jt, "attn_kernel", plan_attn_kernel_name(t->attn_kernel));
    cJSON_AddNumberToObject(jt, "dropout", plan_report_dropout(m, t));
    cJSON_AddStringToObject(jt, "activation_layout", plan_impl_name(t->impl));
    cJSON_AddStringToObject(jt, "offload", plan_offload_name(t->offload));
    cJSON_AddNumberToObject(jt, "fsdp", t->fsdp_impl == 1 ? 1 : 2);   /* what fsdp-* rows mean */
    cJSON_AddStringToObject(jt, "fsdp_grad_sync", plan_fsdp_sync_name(t->fsdp_grad_sync));
    if (t->fsdp_reduce != FSDP_REDUCE_DEFAULT)   /* given, or a config's: the reduce-scatter's dtype */
        cJSON_AddStringToObject(jt, "fsdp_reduce_dtype", t->fsdp_reduce == FSDP_REDUCE_FP32 ? "fp32"
                                : plan_precision(t->precision)->peak == PEAK_FP16 ? "fp16" : "bf16");
    if (t->fsdp_impl == 1) {   /* FSDP1's knobs, only where they mean something */
        cJSON *k = cJSON_AddObjectToObject(jt, "fsdp1");
        cJSON_AddNumberToObject(k, "min_params", t->fsdp1.min_params);
        cJSON_AddBoolToObject(k, "root_only", m->root_only);
        cJSON_AddStringToObject(k, "backward_prefetch", plan_fsdp_bwd_name(t->fsdp1.bwd));
        cJSON_AddBoolToObject(k, "forward_prefetch", t->fsdp1.fwd);
        cJSON_AddBoolToObject(k, "limit_all_gathers", !t->fsdp1.no_limit);
    }
    cJSON_AddStringToObject(jt, "autocast", t->autocast_cpu ? "cpu" : "cuda");
    cJSON_AddStringToObject(jt, "loop", t->loop_trainer ? "trainer" : "common");
    cJSON_AddStringToObject(jt, "zero_grad", t->zero_grad_keep ? "zeros" : "none");
    plan_dims_json(jm, jt, m, t, c);   /* each dimension's fields (fine-tuning, MoE, tp, pp) */
    cJSON *js = cJSON_AddArrayToObject(root, "strategies");
    for (int i = 0; i < p->n_rows; i++) strategy_json(js, m, t, c, &p->rows[i], used);
    cJSON *rules = cJSON_AddObjectToObject(root, "rules");
    for (int q = 0; q < RULE_COUNT; q++) {
        if (!used[q]) continue;
        const RuleInfo *ri = plan_rule_info((RuleId)q);
        cJSON *e = cJSON_AddObjectToObject(rules, ri->name);
        cJSON_AddStringToObject(e, "mechanism", ri->mechanism);
        cJSON_AddStringToObject(e, "source", ri->source);
    }
    cJSON *rec = cJSON_AddObjectToObject(root, "recommendation");
    if (p->recommended >= 0) cJSON_AddStringToObject(rec, "strategy", plan_strategy(p->rows[p->recommended].kind)->name);
    else cJSON_AddNullToObject(rec, "strategy");
    cJSON_AddStringToObject(rec, "reason", p->reason);
    return root;
}

/* "0.464 GiB", "18.0 MiB", "4 B": what a rule holds, small ones readable too. */
static const char *fmt_size(double b, char *buf, size_t len) {
    double a = fabs(b);
    if (a >= GIB) snprintf(buf, len, "%.3f GiB", b / GIB);
    else if (a >= MIB) snprintf(buf, len, "%.1f MiB", b / MIB);
    else if (a >= KIB) snprintf(buf, len, "%.1f KiB", b / KIB);
    else snprintf(buf, len, "%.0f B", b);
    return buf;
}

void plan_report_explain(FILE *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const Plan *p) {
    static double by[RULE_COUNT][TERM_COUNT];
    char a[32], b[32];
    fprintf(f, "# explain: each strategy's peak, term by term, split by the rule that holds the bytes "
               "(rules: docs/architecture.md; sources: docs/formulas.md)\n");
    fprintf(f, "%-13s %-12s %-26s %12s  %s\n", "strategy", "term", "rule", "bytes", "mechanism (source)");
    for (int i = 0; i < p->n_rows; i++) {
        const StrategyPlan *r = &p->rows[i];
        if (peak_by_rule(r, c, by)) continue;
        fprintf(f, "%-13s peak %s at %s\n", plan_strategy(r->kind)->name, plan_fmt_bytes(r->mem.peak, a, sizeof(a)),
                r->mem.peak_where);
        for (int k = 0; k < TERM_COUNT; k++) {
            if (k == TERM_OVERHEAD) continue;
            for (int q = 0; q < RULE_COUNT; q++) {
                if (fabs(by[q][k]) < 0.5) continue;
                const RuleInfo *ri = plan_rule_info((RuleId)q);
                fprintf(f, "%-13s %-12s %-26s %12s  %s (%s)\n", plan_strategy(r->kind)->name, plan_term_name((TermKind)k),
                        ri->name, fmt_size(by[q][k], a, sizeof(a)), ri->mechanism, ri->source);
            }
        }
        if (!r->mem.alloc_model) {
            fprintf(f, "%-13s %-12s %-26s %12s  CUDA context, cuBLAS workspace, NCCL, allocator margin (docs/formulas.md "
                       "\"Fixed overheads\")\n", plan_strategy(r->kind)->name, "overhead", "fixed_overheads",
                    fmt_size(r->mem.term[TERM_OVERHEAD], a, sizeof(a)));
            continue;
        }
        fprintf(f, "%-13s %-12s %-26s %12s  CUDA context, cuBLAS workspace, NCCL (docs/formulas.md \"Fixed overheads\")\n",
                plan_strategy(r->kind)->name, "overhead", "fixed_overheads",
                fmt_size(r->mem.term[TERM_OVERHEAD] - r->mem.margin, a, sizeof(a)));
        char d[32];
        fprintf(f, "%-13s %-12s %-26s %12s  what the caching allocator needs, %s, less the tensor peak: rounding, "
                   "unsplit blocks, cached segments (at the GPU's limit it reserves %s; docs/formulas.md \"The "
                   "allocator in the plan\")\n",
                plan_strategy(r->kind)->name, "overhead", "caching_allocator", fmt_size(r->mem.margin, a, sizeof(a)),
                fmt_size(r->mem.alloc_need, b, sizeof(b)),
                r->mem.alloc_oom ? "- (it runs out)" : fmt_size(r->mem.alloc_reserved_at_limit, d, sizeof(d)));
    }
}
