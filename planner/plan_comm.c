/* plan_comm.c — see plan_comm.h. */
#include "plan_comm.h"

#include <math.h>
#include <string.h>

#include "plan_memory.h"
#include "plan_step.h"


static const char *const PURPOSE_LABELS[PURPOSE_COUNT] = {
    "gradient buckets", "updated parameters", "module parameters", "persistent parameters",
    "gradient norm", "overflow flag", "unit parameters", "unit gradients",
    "gradient shards across nodes", "module buffers (BN stats, rotary)", "SyncBN statistics",
    "SyncBN gradient sums", "gradient shards to host", "parameter shards from host (fwd + bwd)",
    "updated parameters from host", "TP block activations", "TP logits",
    "SP replicated-parameter gradients", "PP stage activations (send/recv)",
    "EP routed tokens (dispatch/combine)", "EP tokens per expert", "EP expert parameters (expert-dp group)",
    "EP expert gradients (expert-dp group)", "CP keys/values of the other shards"};

static const char *plan_coll_purpose_label(CollPurpose p) { return PURPOSE_LABELS[p]; }
int plan_coll_purpose_is_syncbn(CollPurpose p) { return p == PURPOSE_SYNCBN_STATS || p == PURPOSE_SYNCBN_GRADS; }


/* Ring algorithm steps per collective (latency term). */
static double coll_steps(CollKind op, int64_t n) {
    if (n <= 1) return 0;
    return op == COLL_ALL_REDUCE ? 2.0 * (double)(n - 1) : (double)(n - 1);
}

double plan_ddp_buckets(double psi, int grad_bytes, double bucket_bytes) {
    double total = psi * grad_bytes;
    double cap = bucket_bytes > 0 ? bucket_bytes : PLAN_DDP_BUCKET;
    if (total <= PLAN_DDP_FIRST_BUCKET) return 1;
    return 1 + ceil((total - PLAN_DDP_FIRST_BUCKET) / cap);
}

double plan_ddp_buckets_tensors(const ModelSpec *m, int grad_bytes, double first_cap, double cap) {
    if (!plan_model_tensors_known(m)) return -1;
    double n = 0, fill = 0, lim = first_cap;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        for (int k = l->n_tensors - 1; k >= 0; k--) {
            fill += (double)l->tensor_elems[k] * grad_bytes;
            if (fill >= lim) { n++; fill = 0; lim = cap; }
        }
    }
    return n + (fill > 0);
}

/* NCCL's cost model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime,
   the release at commit 01afd20): per algorithm (tree: all-reduce only) and protocol, a base
   latency plus per-hop latencies by link, and a bus bandwidth cut per protocol; NCCL runs the
   pair with the least time. Latencies in microseconds: [tree, ring][LL, LL128, Simple]. */
enum { ALG_TREE = 0, ALG_RING, PROTO_LL = 0, PROTO_LL128, PROTO_SIMPLE };
static const double NCCL_BASE_LAT[2][3] = {{4.4, 4.4, 0}, {3.6, 10.0, 8.4}};
static const double NCCL_HW_LAT[3][2][3] = {                  /* NVLink, PCIe, network */
    {{.52, 1.2, 28}, {.47, 1.9, 3.4}}, {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}}, {{5.0, 8.5, 50}, {2.7, 4.0, 9.6}}};
/* The ring's Simple bus bandwidth as a share of the link's: NCCL's model caps an A100 node's
   bus bandwidth at 235 GB/s (tuning.cc, compCap80) of NVLink 3's 300 GB/s per direction; taken
   for every link. */
#define NCCL_LINK_EFF (235.0 / 300.0)

/* One algorithm x protocol: seconds for payload bytes over n ranks on `nodes` nodes. bus is the
   ring's Simple bus bandwidth (B/s); hw the intra-node link row; lat_scale the preset's hop
   latency over NCCL's ring/LL figure (1 unless --latency). */
static double nccl_time(CollKind op, int a, int p, double payload, double n, double nodes, double bus, int hw,
                        double lat_intra, double lat_net) {
    double nsteps = op == COLL_ALL_REDUCE ? 2 * (n - 1) : op == COLL_BROADCAST ? n : n - 1;
    double inter = nodes <= 1 ? 0 : op == COLL_ALL_REDUCE ? 2 * (nodes - 1) : op == COLL_BROADCAST ? nodes : nodes - 1;
    double bw = bus;
    if (a == ALG_RING && p == PROTO_LL) bw *= (nodes > 1 || op == COLL_ALL_REDUCE) ? 1.0 / 4.0 : 1.0 / 3.0;
    if (a == ALG_RING && p == PROTO_LL128) bw *= 0.92;
    if (a == ALG_TREE) bw = fmin(bw * 0.9, (nodes > 2 ? 80.0 : 110.0) * 1e9);
    if (a == ALG_TREE && p == PROTO_LL) bw *= 1.0 / 3.8;
    if (a == ALG_TREE && p == PROTO_LL128) bw *= nodes <= 1 ? 7.0 / 9.0 : 0.915;
    double algbw = bw * (a == ALG_RING ? n / nsteps : 0.5);
    double li = NCCL_HW_LAT[hw][a][p] * lat_intra * (nodes > 1 && p == PROTO_LL ? 1.8 : 1);
    double ln = NCCL_HW_LAT[2][a][p] * lat_net;
    double lat = NCCL_BASE_LAT[a][p] + (a == ALG_RING ? (nsteps - inter) * li + inter * ln
                                                      : 2 * ((n / nodes - 1) * li + floor(log2(nodes)) * ln));
    return lat * 1e-6 + payload / algbw;
}

int plan_crosses_stride(int64_t stride) { return stride > 1 ? PLAN_CROSSES_STRIDED + (int)stride : 1; }

/* A crossing group's ranks on one node: gpus_per_node packed; one for PLAN_CROSSES_STRIDED;
   gpus_per_node / s (one at least) for a stride s (plan_crosses_stride). */
static double group_per_node(const ClusterSpec *c, int crosses) {
    double gpn = (double)(c->gpus_per_node > 0 ? c->gpus_per_node : 1);
    if (crosses == PLAN_CROSSES_STRIDED) return 1;
    if (crosses > PLAN_CROSSES_STRIDED) return fmax(1, floor(gpn / (crosses - PLAN_CROSSES_STRIDED)));
    return gpn;
}

/* The nodes a group of n ranks spans: 1 within a node, else its ranks group_per_node to a node. */
static double group_nodes(const ClusterSpec *c, double n, int crosses) {
    if (!crosses) return 1;
    return ceil(n / group_per_node(c, crosses));
}

/* The per-operation model's collective: NCCL's ring (and tree, for all-reduce) over every
   protocol, the fastest. A ring across nodes runs one channel per NIC, so its bus bandwidth is
   the node's NICs (the group's ranks per node x the per-GPU share) or the intra-node link, the
   lower: a group of one rank per node (PLAN_CROSSES_STRIDED) has its own NIC share only, a strided
   group (plan_crosses_stride) its ranks' on the node. */
static double nccl_seconds(const ClusterSpec *c, CollKind op, double payload, int64_t group, int crosses) {
    double n = (double)group, nodes = group_nodes(c, n, crosses);
    double link = nodes > 1 ? fmin(c->gpu.intra_bw, n / nodes * c->gpu.inter_bw) : c->gpu.intra_bw;
    double bus = link * NCCL_LINK_EFF * 1e9;
    int hw = c->gpu.nvlink ? 0 : 1;
    double lat_intra = c->gpu.intra_lat * 1e6 / NCCL_HW_LAT[hw][ALG_RING][PROTO_LL];   /* s -> us */
    double lat_net = c->gpu.inter_lat * 1e6 / NCCL_HW_LAT[2][ALG_RING][PROTO_LL];
    double best = INFINITY;
    for (int a = ALG_TREE; a <= ALG_RING; a++)
        for (int p = PROTO_LL; p <= PROTO_SIMPLE; p++) {
            if (a == ALG_TREE && op != COLL_ALL_REDUCE) continue;
            if (p == PROTO_LL128 && !c->gpu.nvlink) continue;   /* LL128 only on NVLink (tuning.cc) */
            best = fmin(best, nccl_time(op, a, p, payload, n, nodes, bus, hw, lat_intra, lat_net));
        }
    return best;
}

/* The CTAs NCCL runs a collective's kernel on, one per channel, each holding an SM while it
   runs (NCCL's kernels take the whole SM's shared memory a large GEMM tile needs too). Inside a
   node as its logs print them, [NVLink]: an 8-GPU HGX A100 node 24 ("Channel 23/24",
   NVIDIA/nccl-tests issue 100), an H100 node 24 (an all-gather's 24 blocks, NVIDIA developer forum
   "Compute-Communication Overlap Causes Severe GEMM Performance Degradation"); a PCIe node 2 (SHM,
   nccl-tests issue 228), taken across nodes too (an estimate). Across NVLink nodes the channels
   follow the NICs (plan_nccl_net_channels). docs/formulas.md "Communication beside compute". */
static const int NCCL_CTAS_NODE[2] = {2, 24};

/* NCCL's inter-node ring search (NVIDIA/nccl src/graph/search.cc ncclTopoCompute, 2.18 on; at
   5067397): a channel enters the node at a NIC and leaves by it, taking its speed from that
   NIC's bandwidth, at the highest speed of the generation's list that the GPU's path to the NIC
   carries (system->maxBw: the NIC, or the PCIe link, x16 lanes x 120 (Gen4) or 240 (Gen5) x 100
   Mb/s / 80 = 24 / 48 GB/s, topo.cc kvDictPciGen: the preset's host link x 0.96). GB/s, highest
   first: speedArrayInter (compute capability < 9), sm90SpeedArrayInter, sm100SpeedArrayInter. */
static const double NCCL_SPEED_SM80[] = {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12};
static const double NCCL_SPEED_SM90[] = {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
static const double NCCL_SPEED_SM100[] = {96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
#define NSPEED(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const struct { const char *gen; int cc; const double *speed; int n; } NCCL_GENS[] = {
    {"hopper", 90, NCCL_SPEED_SM90, NSPEED(NCCL_SPEED_SM90)},
    {"blackwell", 100, NCCL_SPEED_SM100, NSPEED(NCCL_SPEED_SM100)},
};
#define NCCL_MAXCHANNELS 64   /* src/include/device.h at 5067397 (32 in 2.18-2.21): Postset's cap */
#define NCCL_SEARCH_MAX_CHANNELS (NCCL_MAXCHANNELS / 2)   /* init.cc ringGraph->maxChannels; DupChannels' cap */

/* The channels NCCL opens for a ring across nodes: one per NIC from the search (each NIC's
   bandwidth carries one channel at the speed its path allows), doubled when that speed is 25
   GB/s or more unless a Hopper-or-later GPU runs more than 4 at under 50 (ncclTopoDupChannels),
   doubled again for every communicator (connect.cc ncclTopoPostset, "Duplication should be
   complete now"), and again on Hopper and later below 16 where the speed is over 45 GB/s ("Use 4
   compute channels per search channel"). An 8-NIC DGX A100 (200 Gb/s each) or H100 (400 Gb/s)
   gets 16 ("Channel 00/16" on H100 over 3 nodes of 8 NICs, NVIDIA/nccl issue 1453); a node of two
   200 Gb/s NICs 4. */
int plan_nccl_net_channels(const ClusterSpec *c) {
    int cc = 80, nspeed = NSPEED(NCCL_SPEED_SM80);
    const double *speeds = NCCL_SPEED_SM80;
    for (size_t i = 0; c->gpu.eff && i < sizeof(NCCL_GENS) / sizeof(NCCL_GENS[0]); i++)
        if (strcmp(NCCL_GENS[i].gen, c->gpu.eff->key) == 0) {
            cc = NCCL_GENS[i].cc;
            speeds = NCCL_GENS[i].speed;
            nspeed = NCCL_GENS[i].n;
        }
    int nics = plan_cluster_nics(c);
    double gpn = (double)(c->gpus_per_node > 0 ? c->gpus_per_node : 1);
    double path = fmin(gpn * c->gpu.inter_bw / nics, c->gpu.host_bw * 0.96);
    int k = 0;
    while (k < nspeed - 1 && speeds[k] > path) k++;
    double speed = speeds[k];
    int ch = nics < NCCL_SEARCH_MAX_CHANNELS ? nics : NCCL_SEARCH_MAX_CHANNELS;
    if (speed >= 25 && !(cc > 80 && speed < 50 && ch > 4)) {
        int dup = 2 * ch < NCCL_SEARCH_MAX_CHANNELS ? 2 * ch : NCCL_SEARCH_MAX_CHANNELS;
        if (dup > ch) speed /= 2;
        ch = dup;
    }
    ch = 2 * ch < NCCL_MAXCHANNELS ? 2 * ch : NCCL_MAXCHANNELS;
    if (cc >= 90 && speed > 45 && ch < 16) ch *= 2;
    return ch;
}

double plan_coll_steal(const ClusterSpec *c, int crosses_nodes) {
    if (c->comm_steal > 0) return c->comm_steal;   /* measured (CPU ranks) */
    if (plan_time_flat(c) || c->gpu.sms <= 0) return 0;
    double ctas = c->gpu.nvlink && crosses_nodes ? plan_nccl_net_channels(c) : NCCL_CTAS_NODE[c->gpu.nvlink ? 1 : 0];
    return ctas < c->gpu.sms ? ctas / (c->gpu.sms - ctas) : 0;
}

/* An all-to-all of a rank's payload bytes over group ranks: NCCL runs it as grouped
   ncclSend/ncclRecv (nccl-tests alltoall.cu; torch's all_to_all_single on NCCL), no ring: the
   blocks to every peer move at once, the ones to the node's other ranks over its links and the
   ones to other nodes over its NIC share, so the slower of the two bounds it, after one hop's
   latency. The block to itself stays. A measured description (--mfu, validate) gives the links
   as flat rates. */
static double a2a_seconds(const ClusterSpec *c, double payload, int64_t group, int crosses_nodes) {
    double n = (double)group;
    double local = crosses_nodes ? fmin(n, group_per_node(c, crosses_nodes)) : n;   /* the group's ranks on this rank's node */
    double eff = plan_time_flat(c) ? 1 : NCCL_LINK_EFF;
    double intra = payload * (local - 1) / n / (c->gpu.intra_bw * 1e9 * eff);
    double inter = local < n ? payload * (n - local) / n / (c->gpu.inter_bw * 1e9 * eff) : 0;
    return c->coll_base_lat + (crosses_nodes ? c->gpu.inter_lat : c->gpu.intra_lat) + fmax(intra, inter);
}

double plan_coll_seconds(const ClusterSpec *c, CollKind op, double payload, int64_t group,
                         int crosses_nodes) {
    if (group <= 1) return 0;
    if (op == COLL_ALL_TO_ALL) return a2a_seconds(c, payload, group, crosses_nodes);
    if (op == COLL_SEND_RECV) {   /* one peer, one hop at the link's rate (NCCL's p2p: no ring) */
        double bw = (crosses_nodes ? fmin(c->gpu.intra_bw, c->gpu.inter_bw) : c->gpu.intra_bw) * 1e9;
        if (!plan_time_flat(c)) bw *= NCCL_LINK_EFF;
        return c->coll_base_lat + (crosses_nodes ? c->gpu.inter_lat : c->gpu.intra_lat) + payload / bw;
    }
    int measured = op >= 0 && op < 4 && c->coll_bw[op] > 0;
    if (!plan_time_flat(c) && !measured) return nccl_seconds(c, op, payload, group, crosses_nodes);
    double bw = (crosses_nodes ? fmin(c->gpu.intra_bw, c->gpu.inter_bw) : c->gpu.intra_bw) * 1e9;
    double hop = c->gpu.intra_lat;
    if (measured) bw = c->coll_bw[op] * 1e9;   /* a measured description */
    if (op >= 0 && op < 4 && c->coll_lat[op] > 0) hop = c->coll_lat[op];
    /* NCCL's latency model (tuning.cc): base + intra-node hops + inter-node hops, where a ring
       over `nodes` nodes crosses the network 2(nodes-1) times for an all-reduce, nodes-1 times
       otherwise */
    double steps = coll_steps(op, group), inter = 0;
    if (crosses_nodes) {
        double nodes = group_nodes(c, (double)group, crosses_nodes);
        inter = op == COLL_ALL_REDUCE ? 2 * (nodes - 1) : nodes - 1;
        if (inter > steps) inter = steps;
    }
    double lat = c->coll_base_lat + (steps - inter) * hop + inter * c->gpu.inter_lat;
    return lat + payload * coll_bus_factor(op, group) / bw;
}

double plan_coll_seconds_last(const ClusterSpec *c, CollPrice *last, CollKind op, double payload, int64_t group,
                              int crosses_nodes) {
    if ((int)op != last->op || payload != last->payload || group != last->group || crosses_nodes != last->crosses) {
        *last = (CollPrice){(int)op, crosses_nodes, payload, plan_coll_seconds(c, op, payload, group, crosses_nodes), group};
    }
    return last->s;
}

/* One row of the table: count collectives moving payload bytes (summed over the step's events of
   the same op, phase and purpose); its time is the sum of the events' own (each priced at its own
   mean size, as the simulation prices it: NCCL's time is not affine in the size, its protocols and
   algorithms switch, so count x one collective of the row's mean size would not be the sum). */
static void finish_row(CommPlan *p, PlanColl *x) {
    x->wire_bytes = x->payload_bytes * coll_bus_factor(x->op, x->group);
    p->wire_bytes += x->wire_bytes;
    p->seconds += x->seconds;
}

/* The collective table reads the step account (plan_step.h): every transfer its rules emit,
   summed per (op, phase, purpose) in the order they first appear, x K for those that run every
   micro-step; host copies listed apart. Times on the whole cluster's links. */
void plan_comm_step(const Step *st, CommPlan *out) {
    memset(out, 0, sizeof(*out));
    if (st->failed) return;
    const ClusterSpec *c = &st->view.full;
    double K = (double)st->view.t.grad_accum;
    CollPrice last = PLAN_COLL_PRICE_NONE;
    for (int e = 0; e < st->n_xfer; e++) {
        const StepXfer *x = &st->xfer[e];
        double mult = x->micro == MICRO_EVERY ? K : 1;
        if (x->kind != XFER_COLL) {
            if (out->n_host >= 2 || x->payload <= 0) continue;
            PlanHostCopy *h = &out->host[out->n_host++];
            *h = (PlanHostCopy){x->kind == XFER_D2H ? "copy_d2h" : "copy_h2d", (PhaseKind)x->phase,
                                (CollPurpose)x->purpose, plan_coll_purpose_label((CollPurpose)x->purpose),
                                x->payload, x->seconds};
            out->host_bytes += h->bytes;
            out->host_seconds += h->seconds;
            continue;
        }
        if (x->group <= 1 || x->count <= 0 || x->payload <= 0) continue;
        int k = 0;
        while (k < out->n && !(out->c[k].op == x->op && out->c[k].phase == x->phase &&
                               out->c[k].purpose == x->purpose && out->c[k].group == x->group))
            k++;
        if (k == out->n) {
            if (out->n >= PLAN_MAX_COLLS) continue;
            out->c[out->n++] = (PlanColl){(CollKind)x->op, (PhaseKind)x->phase, (CollPurpose)x->purpose,
                                          plan_coll_purpose_label((CollPurpose)x->purpose), 0, 0, 0, x->group, 0};
        }
        double one = plan_coll_seconds_last(c, &last, (CollKind)x->op, x->payload / x->count, x->group, x->crosses);
        out->c[k].count += x->count * mult;
        out->c[k].payload_bytes += x->payload * mult;
        out->c[k].seconds += x->count * mult * one;
    }
    for (int k = 0; k < out->n; k++) finish_row(out, &out->c[k]);
}

void plan_comm(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
               CommPlan *out) {
    Step st;
    plan_step_build(&st, m, t, c, sk);
    plan_comm_step(&st, out);
    plan_step_free(&st);
}

void plan_fsdp_no_sync(const Step *st, double *extra_bytes, double *saved_wire_bytes) {
    *extra_bytes = *saved_wire_bytes = 0;
    if (st->failed) return;
    const RankView *v = &st->view;   /* the rank's model and the data-parallel group it shards over */
    const PrecisionSpec *p = plan_precision(v->t.precision);
    MemSizes z;
    plan_memory_sizes(&v->m, &v->t, &v->dp, v->sk, &z);
    double K = (double)v->t.grad_accum;
    *extra_bytes = v->dp.gpus > 1 ? (z.psi - z.psi_shard) * p->grad_bytes : 0;
    *saved_wire_bytes = (K - 1) * (double)z.n * z.psi_shard * p->grad_bytes *
                        coll_bus_factor(COLL_REDUCE_SCATTER, z.n);
}
