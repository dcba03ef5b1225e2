/* cli_output.c — see cli_output.h. */
#include "cli_output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_plot.h"
#include "plan_util.h"
#include "prof_trace.h"

int cli_write_sim_trace(const char *path, const ModelSpec *m, const TrainSpec *t,
                        const ClusterSpec *c, const Plan *p) {
    TraceWriter *w = prof_trace_open(path);
    if (!w) return -1;
    static const char *const TERM_KEYS[TERM_COUNT] = {"params", "grads", "comm_buffers", "optimizer",
                                                      "activations", "transient", "overhead"};
    int rc = 0;
    for (int i = 0; i < p->n_rows; i++) {
        SimResult s;   /* the row's own step, simulated with its op list */
        if (plan_sim_step(&p->rows[i].step, 1, &s)) { rc = -1; break; }
        char pname[64];
        snprintf(pname, sizeof(pname), "%s (simulated)", plan_strategy(p->rows[i].kind)->name);
        prof_trace_process_name(w, i, pname);
        prof_trace_process_sort(w, i, i);
        prof_trace_thread_name(w, i, LANE_COMPUTE, "compute");
        prof_trace_thread_name(w, i, LANE_COMM, "comm");
        for (int k = 0; k < s.n_ops; k++) {
            const SimOp *o = &s.ops[k];
            const char *key = "bytes";
            prof_trace_complete(w, o->name, o->lane == LANE_COMPUTE ? "compute" : "comm", i, o->lane,
                                o->start * 1e6, o->dur * 1e6, o->bytes > 0 ? &key : NULL, &o->bytes,
                                o->bytes > 0 ? 1 : 0);
        }
        for (int k = 0; k < s.n_mem; k++)
            prof_trace_counter(w, "memory (bytes)", i, s.mem[k].t * 1e6, TERM_KEYS, s.mem[k].term, TERM_COUNT);
        plan_sim_free(&s);
    }
    if (prof_trace_end(w)) rc = -1;
    return rc;
}

int cli_write_plot(const char *path, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                   const Plan *p) {
    char dat[1024], curve[1024], gp[1024], data[2100];
    snprintf(dat, sizeof(dat), "%s.terms.dat", path);
    snprintf(curve, sizeof(curve), "%s.curve.dat", path);
    snprintf(gp, sizeof(gp), "%s.gp", path);
    FILE *f = fopen(dat, "w");
    if (!f) return -1;
    fprintf(f, "# strategy params grads comm_buffers optimizer activations transient overhead (GiB, at the peak)\n");
    for (int i = 0; i < p->n_rows; i++) {
        fprintf(f, "%s", plan_strategy(p->rows[i].kind)->name);
        for (int k = 0; k < TERM_COUNT; k++) fprintf(f, " %.6f", p->rows[i].mem.term[k] / GIB);
        fprintf(f, "\n");
    }
    if (fclose(f)) return -1;
    f = fopen(curve, "w");
    if (!f) return -1;
    for (int i = 0; i < p->n_rows; i++) {
        SimResult s;
        if (plan_sim_step(&p->rows[i].step, 1, &s)) { fclose(f); return -1; }
        fprintf(f, "# %s: time_ms total_GiB\n", plan_strategy(p->rows[i].kind)->name);
        for (int k = 0; k < s.n_mem; k++) fprintf(f, "%.6f %.6f\n", s.mem[k].t * 1e3, s.mem[k].total / GIB);
        fprintf(f, "\n\n");
        plan_sim_free(&s);
    }
    if (fclose(f)) return -1;
    f = fopen(gp, "w");
    if (!f) return -1;
    double top = c->gpu.mem_bytes;
    for (int i = 0; i < p->n_rows; i++) if (p->rows[i].mem.peak > top) top = p->rows[i].mem.peak;
    top = 1.08 * top / GIB;
    cli_plot_terminal(f, path, 1400, 560);
    fprintf(f, "set multiplot layout 1,2 title '%s on %lld x %s (%.1f GiB): memory per GPU'\n", m->name,
            (long long)c->gpus, c->gpu.name, c->gpu.mem_bytes / GIB);
    fprintf(f, "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
               "set boxwidth 0.7\nset yrange [0:%.3f]\nset ylabel 'GiB at the peak'\nset xtics rotate by -30\nset key outside right top vertical\n"
               "set arrow 1 from graph 0, first %.6f to graph 1, first %.6f nohead dt 2 lw 2 lc rgb 'red'\n"
               "set title 'breakdown at each strategy peak (red: capacity)'\n",
            top, c->gpu.mem_bytes / GIB, c->gpu.mem_bytes / GIB);
    fprintf(f, "plot '%s' using 2:xtic(1) title 'params'", dat);
    static const char *const NAMES[TERM_COUNT] = {"params", "grads", "comm buffers", "optimizer",
                                                  "activations", "transient", "overhead"};
    for (int k = 1; k < TERM_COUNT; k++) fprintf(f, ", '' using %d title '%s'", k + 2, NAMES[k]);
    fprintf(f, "\nunset arrow 1\nset style data lines\nset xtics norotate\nset xlabel 'time in the simulated step (ms)'\n"
               "set ylabel 'GiB'\nset title 'memory over one step (simulated)'\n");
    fprintf(f, "plot ");
    for (int i = 0; i < p->n_rows; i++)
        fprintf(f, "%s'%s' index %d using 1:2 with steps lw 2 title '%s'", i ? ", " : "", curve, i,
                plan_strategy(p->rows[i].kind)->name);
    fprintf(f, ", %.6f with lines dt 2 lc rgb 'red' title 'capacity'\nunset multiplot\n", c->gpu.mem_bytes / GIB);
    if (fclose(f)) return -1;
    snprintf(data, sizeof(data), "%s, %s", dat, curve);
    return cli_plot_run(gp, data);
}
