/* plan_gpu.c — the GPU preset table. Memory: the total the driver reports (nvidia-smi, MiB).
 * Bandwidth: NVLink per direction (half the datasheet's bidirectional total) or PCIe per
 * direction; inter-node: the node's NIC bandwidth divided by its GPUs. FLOP/s: datasheet
 * dense (no sparsity). Sources per row in docs/gpus.md. */
#include "plan_gpu.h"

#include "plan_shares.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIB_ (1024.0 * 1024.0)
#define WS_OLD (8.125 * MIB_)     /* cuBLAS workspace before Hopper */
#define WS_HOPPER (32.0 * MIB_)   /* cuBLAS workspace on Hopper */
/* Per-hop latency of NCCL's ring with the LL protocol (NVIDIA/nccl src/graph/tuning.cc, hwLat
   Ring/LL): NVLink 0.47 us, PCIe 1.0 us, network 2.7 us; small collectives use LL. */
#define HOP_NVLINK 0.47e-6
#define HOP_PCIE 1.0e-6
#define HOP_NET 2.7e-6
/* Host links: achieved pinned host<->device copy bandwidth per direction (CUDA bandwidthTest
   reaches about 80% of the PCIe x16 payload rate: gen3 15.75, gen4 31.5, gen5 63 GB/s). */
#define PCIE3 12.0
#define PCIE4 25.0
#define PCIE5 50.0
#define GIB_ (1024.0 * MIB_)

/* Achieved rates per generation (docs/gpus.md "Achieved rates"). GEMMs: the Maximum Achievable
   Matmul FLOPS table (stas00/ml-engineering compute/accelerator/README.md, bf16, mean of 100
   iterations): A100 SXM 271.2 of 312, H100 SXM 794.5 of 989 ("H200 is the same"). Flash
   attention: FlashAttention-2 on H100 SXM5, head dim 128 (Shah et al. 2024, FlashAttention-3,
   arXiv 2407.08608, Fig. 5 causal forward and Fig. 6 backward, TFLOP/s at 512 ... 16k); on A100
   the FlashAttention-2 paper's maxima (Dao 2023, arXiv 2307.08691: forward up to 73 %, backward
   up to 63 % of the peak) shaped by the H100 curve. Other GPUs: no published figures, the A100's
   attention and the lower GEMM figure (H100's) are assumed. The training shares (gemm_train;
   attention's per kernel, plan_attn_share) are fitted on the published runs (plan_shares.h, `make fit-time`); other
   generations take Ampere's. */
#define H_F(x) ((x) / 989.0)
static const GpuEff EFF_HOPPER = {"Hopper (H100/H200 SXM)", "hopper", 794.5 / 989.0,
    {H_F(191), H_F(260), H_F(298), H_F(319), H_F(333), H_F(335)},
    {H_F(214), H_F(260), H_F(291), H_F(310), H_F(318), H_F(322)}, PLAN_SHARE_GEMM_HOPPER, 1};
#define A_F(x) (0.73 * (x) / 335.0)
#define A_B(x) (0.63 * (x) / 322.0)
static const GpuEff EFF_AMPERE = {"Ampere (A100 SXM)", "ampere", 271.2 / 312.0,
    {A_F(191), A_F(260), A_F(298), A_F(319), A_F(333), A_F(335)},
    {A_B(214), A_B(260), A_B(291), A_B(310), A_B(318), A_B(322)}, PLAN_SHARE_GEMM_AMPERE, 1};
/* Blackwell: the GEMM figure measured (MAMF table: B200 SXM 1745.0 of 2250, torch 2.7.1+cu128);
   no published flash-attention curve in this form: Hopper's fractions assumed (measured 0). */
static const GpuEff EFF_BLACKWELL = {"Blackwell (B200; GEMM measured, attention assumed Hopper's)", "blackwell",
    1745.0 / 2250.0,
    {H_F(191), H_F(260), H_F(298), H_F(319), H_F(333), H_F(335)},
    {H_F(214), H_F(260), H_F(291), H_F(310), H_F(318), H_F(322)}, PLAN_SHARE_GEMM_BLACKWELL, 0};
static const GpuEff EFF_ASSUMED = {"not measured (A100 attention, H100 GEMM fraction assumed)", "assumed", 794.5 / 989.0,
    {A_F(191), A_F(260), A_F(298), A_F(319), A_F(333), A_F(335)},
    {A_B(214), A_B(260), A_B(291), A_B(310), A_B(318), A_B(322)}, PLAN_SHARE_GEMM_AMPERE, 0};
/* FlashAttention-3 on H100 SXM5, head dim 128: the same figures' FlashAttention-3 bars (Shah et
   al. 2024, Fig. 5 causal forward 292 ... 616, Fig. 6 backward 316 ... 561 TFLOP/s). Hopper only
   (flash-attn's hopper/ package needs sm90). FlashAttention-4 on B200: no curve is published in
   this form; an estimate: FlashAttention-3's fractions x the ratio of the two papers' headline
   utilizations (Zadouri et al. 2026, FlashAttention-4, arXiv 2603.05451: up to 1613 TFLOP/s bf16,
   71 % of B200's 2250; FlashAttention-3: up to 740 TFLOP/s, 75 % of H100's 989). Each kernel's
   training share is its own (plan_attn_share: PLAN_SHARE_ATTN_FA3, _FA4), fitted as the GEMM
   shares are per generation. */
#define FA4_OF_FA3 ((1613.0 / 2250.0) / (740.0 / 989.0))
#define B_F(x) (FA4_OF_FA3 * (x) / 989.0)
static const AttnCurve ATTN_CURVES[] = {
    {ATTN_KERNEL_FA3, "hopper", {H_F(292), H_F(423), H_F(521), H_F(579), H_F(602), H_F(616)},
     {H_F(316), H_F(424), H_F(501), H_F(542), H_F(559), H_F(561)}, 1},
    {ATTN_KERNEL_FA4, "blackwell", {B_F(292), B_F(423), B_F(521), B_F(579), B_F(602), B_F(616)},
     {B_F(316), B_F(424), B_F(501), B_F(542), B_F(559), B_F(561)}, 0},
};
#define N_CURVES ((int)(sizeof(ATTN_CURVES) / sizeof(ATTN_CURVES[0])))
#undef B_F
#undef FA4_OF_FA3
#undef H_F
#undef A_F
#undef A_B

static const GpuPreset GPUS[] = {
    {"v100-16gb", "NVIDIA Tesla V100-SXM2-16GB", 16160 * MIB_, 150, 12.5, HOP_NVLINK, HOP_NET, {15.7, 125, 0}, WS_OLD, 900, "NVLink 2 (300 GB/s bidirectional)", 64 * GIB_, PCIE3, 136.5, "DGX-1 (8 GPUs, 512 GiB, 2 x Xeon E5-2698 v4, 4 ch DDR4-2133 each)", 80, 1, &EFF_ASSUMED},
    {"v100-32gb", "NVIDIA Tesla V100-SXM2-32GB", 32510 * MIB_, 150, 12.5, HOP_NVLINK, HOP_NET, {15.7, 125, 0}, WS_OLD, 900, "NVLink 2 (300 GB/s bidirectional)", 96 * GIB_, PCIE3, 256.0, "DGX-2 (16 GPUs, 1.5 TiB, 2 x Xeon 8168, 6 ch DDR4-2666 each)", 80, 1, &EFF_ASSUMED},
    {"t4", "NVIDIA T4", 15360 * MIB_, 16, 3.125, HOP_PCIE, HOP_NET, {8.1, 65, 0}, WS_OLD, 320, "PCIe 3.0 x16", 48 * GIB_, PCIE3, 140.8, "AWS g4dn.12xlarge (4 GPUs, 192 GiB, Xeon 8259CL, 6 ch DDR4-2933)", 40, 0, &EFF_ASSUMED},
    {"titan-rtx", "NVIDIA TITAN RTX", 24220 * MIB_, 16, 3.125, HOP_PCIE, HOP_NET, {16.3, 130, 0}, WS_OLD, 672, "PCIe 3.0 x16", 64 * GIB_, PCIE3, 93.9, "workstation (2 GPUs, 128 GiB, 4 ch DDR4-2933)", 72, 0, &EFF_ASSUMED},
    {"rtx3090", "NVIDIA GeForce RTX 3090", 24576 * MIB_, 32, 3.125, HOP_PCIE, HOP_NET, {35.6, 71, 71}, WS_OLD, 936, "PCIe 4.0 x16", 64 * GIB_, PCIE4, 102.4, "workstation (2 GPUs, 128 GiB, 4 ch DDR4-3200)", 82, 0, &EFF_ASSUMED},
    {"rtx4090", "NVIDIA GeForce RTX 4090", 24564 * MIB_, 32, 3.125, HOP_PCIE, HOP_NET, {82.6, 165.2, 165.2}, WS_OLD, 1008, "PCIe 4.0 x16", 64 * GIB_, PCIE4, 153.6, "workstation (2 GPUs, 128 GiB, 4 ch DDR5-4800)", 128, 0, &EFF_ASSUMED},
    {"a10g", "NVIDIA A10G", 23028 * MIB_, 32, 3.125, HOP_PCIE, HOP_NET, {31.2, 125, 125}, WS_OLD, 600, "PCIe 4.0 x16", 96 * GIB_, PCIE4, 409.6, "AWS g5.48xlarge (8 GPUs, 768 GiB, 2 x EPYC 7R32, 8 ch DDR4-3200 each)", 80, 0, &EFF_ASSUMED},
    {"l4", "NVIDIA L4", 23034 * MIB_, 32, 3.125, HOP_PCIE, HOP_NET, {30.3, 121, 121}, WS_OLD, 300, "PCIe 4.0 x16", 96 * GIB_, PCIE4, 409.6, "AWS g6.48xlarge (8 GPUs, 768 GiB, 2 x EPYC 7R13, 8 ch DDR4-3200 each)", 58, 0, &EFF_ASSUMED},
    {"a100-40gb", "NVIDIA A100-SXM4-40GB", 40960 * MIB_, 300, 25, HOP_NVLINK, HOP_NET, {19.5, 312, 312}, WS_OLD, 1555, "NVLink 3 (600 GB/s bidirectional)", 128 * GIB_, PCIE4, 409.6, "DGX A100 320GB (8 GPUs, 1 TiB, 2 x EPYC 7742, 8 ch DDR4-3200 each)", 108, 1, &EFF_AMPERE},
    {"a100-80gb", "NVIDIA A100-SXM4-80GB", 81920 * MIB_, 300, 25, HOP_NVLINK, HOP_NET, {19.5, 312, 312}, WS_OLD, 2039, "NVLink 3 (600 GB/s bidirectional)", 256 * GIB_, PCIE4, 409.6, "DGX A100 640GB (8 GPUs, 2 TiB, 2 x EPYC 7742, 8 ch DDR4-3200 each)", 108, 1, &EFF_AMPERE},
    {"h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * MIB_, 450, 50, HOP_NVLINK, HOP_NET, {67, 989.5, 989.5}, WS_HOPPER, 3350, "NVLink 4 (900 GB/s bidirectional)", 256 * GIB_, PCIE5, 614.4, "DGX H100 (8 GPUs, 2 TiB, 2 x Xeon 8480C, 8 ch DDR5-4800 each)", 132, 1, &EFF_HOPPER},
    {"h100-96gb", "NVIDIA H100 96GB HBM2e (500 W)", 96e9, 450, 50, HOP_NVLINK, HOP_NET, {67, 989.5, 989.5}, WS_HOPPER, 2400, "NVLink 4 (900 GB/s bidirectional)", 256 * GIB_, PCIE5, 614.4, "Grand Teton (8 GPUs; host as DGX H100 assumed)", 132, 1, &EFF_HOPPER},
    {"h800", "NVIDIA H800 80GB HBM3", 81559 * MIB_, 200, 50, HOP_NVLINK, HOP_NET, {67, 989.5, 989.5}, WS_HOPPER, 3350, "NVLink 4 (400 GB/s bidirectional)", 256 * GIB_, PCIE5, 614.4, "DGX H800 (8 GPUs, as DGX H100)", 132, 1, &EFF_HOPPER},
    {"a800-80gb", "NVIDIA A800-SXM4-80GB", 81920 * MIB_, 200, 25, HOP_NVLINK, HOP_NET, {19.5, 312, 312}, WS_OLD, 2039, "NVLink 3 (400 GB/s bidirectional)", 256 * GIB_, PCIE4, 409.6, "DGX A800 (8 GPUs, as DGX A100 640GB)", 108, 1, &EFF_AMPERE},
    {"b200", "NVIDIA B200", 180 * GIB_, 900, 50, HOP_NVLINK, HOP_NET, {80, 2250, 2250}, WS_HOPPER, 8000, "NVLink 5 (1.8 TB/s bidirectional)", 256 * GIB_, PCIE5, 716.8, "DGX B200 (8 GPUs, 2 TiB, 2 x Xeon 8570, 8 ch DDR5-5600 each)", 148, 1, &EFF_BLACKWELL},
    {"h200", "NVIDIA H200", 143771 * MIB_, 450, 50, HOP_NVLINK, HOP_NET, {67, 989.5, 989.5}, WS_HOPPER, 4800, "NVLink 4 (900 GB/s bidirectional)", 256 * GIB_, PCIE5, 614.4, "DGX H200 (8 GPUs, 2 TiB, 2 x Xeon 8480C, 8 ch DDR5-4800 each)", 132, 1, &EFF_HOPPER},
};
#define N_GPUS ((int)(sizeof(GPUS) / sizeof(GPUS[0])))

int plan_gpu_count(void) { return N_GPUS; }
const GpuPreset *plan_gpu_preset(int i) { return (i >= 0 && i < N_GPUS) ? &GPUS[i] : NULL; }

const GpuPreset *plan_gpu_by_name(const char *name) {
    for (int i = 0; i < N_GPUS; i++)
        if (strcmp(GPUS[i].name, name) == 0) return &GPUS[i];
    return NULL;
}

const char *plan_gpu_names(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t n = 0;
        for (int i = 0; i < N_GPUS; i++)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ", " : "", GPUS[i].name);
    }
    return buf;
}

int plan_attn_curve(const GpuEff *e, AttnKernel k, const double **fwd, const double **bwd) {
    if (!e) return -1;
    if (k == ATTN_KERNEL_FA2) {
        *fwd = e->attn_fwd;
        *bwd = e->attn_bwd;
        return e->measured;
    }
    for (int i = 0; i < N_CURVES; i++)
        if (ATTN_CURVES[i].kernel == k && strcmp(ATTN_CURVES[i].gen, e->key) == 0) {
            *fwd = ATTN_CURVES[i].fwd;
            *bwd = ATTN_CURVES[i].bwd;
            return ATTN_CURVES[i].measured;
        }
    return -1;
}

double plan_attn_share(AttnKernel k) {
    static const double SHARE[ATTN_KERNEL_COUNT] = {PLAN_SHARE_ATTN_FA2, PLAN_SHARE_ATTN_FA3, PLAN_SHARE_ATTN_FA4};
    return SHARE[k];
}

const char *plan_attn_kernel_gpus(AttnKernel k, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_GPUS && n < len; i++)
        if (plan_attn_curve(GPUS[i].eff, k, &(const double *){0}, &(const double *){0}) >= 0)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", GPUS[i].name);
    return buf;
}

void plan_cluster_defaults(ClusterSpec *c) {
    memset(c, 0, sizeof(*c));
    c->gpu = *plan_gpu_by_name(PLAN_DEFAULT_GPU);
    c->gpus = 1;
    c->gpus_per_node = 1;
    c->cuda_context = PLAN_CUDA_CONTEXT_BYTES;
    c->nccl_per_comm = PLAN_NCCL_COMM_BYTES;
    c->alloc_margin = PLAN_ALLOC_MARGIN_FRAC;
    c->margin_is_frac = 1;
    c->alloc_model = 0;
    plan_alloc_config_defaults(&c->alloc_conf);
    c->mfu = 0;   /* time from the operations; --mfu F restores the flat model */
    c->coll_base_lat = PLAN_COLL_BASE_LAT;
}

/* NICs per node: --nics, else the fewest of the preset's own (its node's one NIC per GPU at the
   preset's inter_bw: docs/gpus.md) that carry the node's bandwidth (an estimate where a source
   gives the node's bandwidth and not its NICs). */
int plan_cluster_nics(const ClusterSpec *c) {
    double gpn = (double)(c->gpus_per_node > 0 ? c->gpus_per_node : 1);
    if (c->nics > 0) return c->nics;
    const GpuPreset *ref = c->gpu.name ? plan_gpu_by_name(c->gpu.name) : NULL;
    double nic = ref && ref->inter_bw > 0 ? ref->inter_bw : c->gpu.inter_bw;
    double n = nic > 0 ? ceil(gpn * c->gpu.inter_bw / nic - 1e-9) : gpn;
    return n < 1 ? 1 : (int)n;
}

int64_t plan_cluster_nodes(const ClusterSpec *c) {
    return (c->gpus + c->gpus_per_node - 1) / c->gpus_per_node;
}

double plan_cluster_host_mem(const ClusterSpec *c) {
    return c->host_mem > 0 ? c->host_mem : c->gpu.host_mem_per_gpu * (double)c->gpus_per_node;
}
