/* placeholder until bench/fit_time.py writes it */
static const PlanTimeSource PLAN_TIME_SOURCES[] = {
    {"llm-foundry", 209, 3.5, "a100-40gb a100-80gb h100-80gb", "fsdp-full fsdp-grad-op", "none full", "bf16", "sdpa", "1", "1", 512, 65536, 8, 512},
};
