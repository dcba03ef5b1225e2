#!/usr/bin/env python3
"""gen_cases.py — writes tests/hostile/cases.tsv and the static fixtures in tests/hostile/fixtures/:
the hostile-input pass over the surface of issues 23 and 25-29 and 36 (configs, recipes, parsers,
emitters, quantized bases, bounds, alloc). tests/test_cli_hostile.c runs every case under a time
limit and checks the contract on each (no crash, no hang, exit 0/1/2, one error line, nothing on
stdout after an error, no inf/nan, valid JSON) plus the case's own expected exit status and words.

Each case: EXPECT <tab> ARGS <tab> WORDS <tab> NOTE
  EXPECT  the exit status (0, 1 or 2), or "02" (either: a setup whose fit depends on the model)
  ARGS    memplan's arguments; $F is tests/hostile/fixtures, $T a fresh temp folder with the
          runtime fixtures (fifo, big.yaml: 5 MiB), $C tests/data/configs, $H tests/data/hf
  WORDS   a piece stderr must hold ("-": none)
  NOTE    what the case is (issue item), for the failure message
Regenerate: python3 tests/hostile/gen_cases.py (deterministic).
"""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
cases = []


def case(expect, args, words="-", note=""):
    cases.append((str(expect), args, words, note))


def fixture(name, text):
    with open(os.path.join(FIX, name), "w") as f:
        f.write(text)
    return "$F/" + name


os.makedirs(FIX, exist_ok=True)

# ---- parsers bounded (item 6) ----
bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
                                           for p, c in zip("abcdefgh", "bcdefghi")) + "distributed_type: FSDP\n"
fixture("alias_bomb.yaml", bomb)
case(2, "--config $F/alias_bomb.yaml --model gpt2", "alias", "item 6: a 580-byte YAML alias bomb stops at the bound")
fixture("deep.json", "[" * 100000 + "]" * 100000)
case(2, "--config $F/deep.json --model gpt2", "nests deeper", "item 6: 100,000-deep JSON-looking brackets")
fixture("deep_obj.json", '{"a":' * 5000 + "1" + "}" * 5000)
case(2, "--config $F/deep_obj.json --model gpt2", "deeper", "item 6: 5,000-deep JSON object")
fixture("deep_flow.yaml", "distributed_type: FSDP\nx: " + "[" * 100000 + "]" * 100000 + "\n")
case(2, "--config $F/deep_flow.yaml --model gpt2", "deeper", "item 6: 100,000-deep YAML flow")
fixture("deep_block.yaml", "distributed_type: FSDP\n" + "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n")
case(2, "--config $F/deep_block.yaml --model gpt2", "deeper", "item 6: 200-deep YAML block mapping")
fixture("deep.toml", "[training]\nx = " + "[" * 3000 + "]" * 3000 + "\n")
case(2, "--config $F/deep.toml --model gpt2", "deeper", "item 6: deep TOML array")
case(2, "--config /dev/zero --model gpt2", "not a regular file", "item 6: a device as --config")
case(2, "--config $T/fifo --model gpt2", "not a regular file", "item 6: a FIFO as --config")
case(2, "--config $T --model gpt2", "not a regular file", "item 6: a folder as --config")
case(2, "--config $T/big.yaml --model gpt2", "larger than 4 MiB", "item 6: a 5 MiB file")
case(2, "--config /nonexistent/x.yaml --model gpt2", "No such file", "item 6: missing file")
fixture("empty.yaml", "")
case(2, "--config $F/empty.yaml --model gpt2", "-", "an empty file")
fixture("nul.json", '{"train_batch_size": 8}\0garbage')
case(2, "--config $F/nul.json --model gpt2", "-", "a NUL byte")
fixture("binary.bin", "".join(chr(c) for c in range(1, 256)))
case(2, "--config $F/binary.bin --model gpt2", "-", "binary garbage")
fixture("two_docs.yaml", "distributed_type: FSDP\n---\ndistributed_type: DEEPSPEED\n")
case(2, "--config $F/two_docs.yaml --model gpt2", "more than one YAML document", "PyYAML safe_load refuses a stream")
fixture("list_root.yaml", "- a\n- b\n")
case(2, "--config $F/list_root.yaml --model gpt2", "mapping", "a list at the root")
fixture("alias_missing.yaml", "distributed_type: FSDP\nfsdp_config: *nope\n")
case(2, "--config $F/alias_missing.yaml --model gpt2", "anchor", "an alias to no anchor")
fixture("complex_key.yaml", "distributed_type: FSDP\n? [a, b]\n: 1\n")
case(2, "--config $F/complex_key.yaml --model gpt2", "key", "a list as a key")
fixture("bad_yaml.yaml", "distributed_type: FSDP\n  bad: [\n")
case(2, "--config $F/bad_yaml.yaml --model gpt2", "-", "invalid YAML")
fixture("bad_json.json", '{"train_batch_size": 8,,}')
case(2, "--config $F/bad_json.json --model gpt2", "not valid JSON", "invalid JSON")
fixture("newline_val.yaml", 'distributed_type: "MULTI_GPU"\nmain_training_function: x\nweird_key: "a\\nb"\n')
case(0, "--config $F/newline_val.yaml --model gpt2", "a\\nb", "a newline in a value stays escaped in the warning")
fixture("newline_bad.yaml", 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: "HALF\\nSHARD"\n')
case(2, "--config $F/newline_bad.yaml --model gpt2", "HALF\\nSHARD", "a newline in a refused value")

# ---- read as the framework reads (item 5) ----
fixture("dup_ds.json", '{"train_micro_batch_size_per_gpu": 2, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}')
case(2, "--config $F/dup_ds.json --model gpt2 --gpus 2", "appears twice", "DeepSpeed refuses duplicate keys")
fixture("dup_acc.yaml", "distributed_type: MULTI_GPU\nmixed_precision: fp16\nmixed_precision: bf16\nnum_processes: 2\n")
case(0, "--config $F/dup_acc.yaml --model gpt2", "-", "accelerate (PyYAML) keeps the last duplicate")
fixture("dup_lf.yaml", "stage: sft\nfinetuning_type: lora\ncutoff_len: 512\ncutoff_len: 1024\n")
case(2, "--config $F/dup_lf.yaml --model gpt2", "appears twice", "LLaMA-Factory (OmegaConf) refuses duplicates")
fixture("merge.yaml", "base: &b\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\ndistributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  <<: *b\n  fsdp_offload_params: false\n")
case(0, "--config $F/merge.yaml --model gpt2", "-", "YAML merge key applied")
fixture("merge_bad.yaml", "distributed_type: FSDP\nfsdp_config:\n  <<: 3\n")
case(2, "--config $F/merge_bad.yaml --model gpt2", "merge key", "a merge key of a number")
fixture("zo_string.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": "3", "bf16": {"enabled": true}}')
case(2, "--config $F/zo_string.json --model gpt2", "table", "zero_optimization \"3\" (wrong type)")
fixture("zo_true.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": true, "bf16": {"enabled": true}}')
case(0, "--config $F/zo_true.json --model gpt2 --gpus 2", "-", "zero_optimization true: DeepSpeed's stage 1")
fixture("zo_list.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": [3], "bf16": {"enabled": true}}')
case(2, "--config $F/zo_list.json --model gpt2", "table", "zero_optimization as a list")
fixture("fp16_string.json", '{"train_micro_batch_size_per_gpu": 1, "fp16": "yes"}')
case(2, "--config $F/fp16_string.json --model gpt2", "table", "fp16 as a string")
fixture("zeros.json", '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0}}')
case(0, "--config $F/zeros.json --model gpt2 --gpus 2", "-", "DeepSpeed's zeros are valid where its config says ge=0")
fixture("reduce0.json", '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}')
case(2, "--config $F/reduce0.json --model gpt2 --gpus 2", "reduce_bucket_size", "reduce_bucket_size 0 refused as DeepSpeed 0.19.8 refuses it (zero/config.py: gt=0)")
case(2, "--model gpt2 --ds-reduce-bucket 0 --strategy zero2", "--ds-reduce-bucket", "item 9: --ds-reduce-bucket 0 refused (DeepSpeed: gt=0)")
fixture("neg.json", '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}')
case(2, "--config $F/neg.json --model gpt2 --gpus 2", "from 1", "a negative bucket")
for i, v in enumerate(["4.5", '"eight"', "1e30", "-3", "true", "null", "[1]"]):
    fixture(f"mb_{i}.json", '{"train_micro_batch_size_per_gpu": %s, "bf16": {"enabled": true}}' % v)
    case("02", f"--config $F/mb_{i}.json --model gpt2", "-", f"micro-batch {v}")
fixture("stage5.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 5}}')
case(2, "--config $F/stage5.json --model gpt2", "0 to 3", "stage 5")

# ---- "auto" said, not assumed (item 1) ----
AX = "$C/axolotl-ai-cloud+axolotl/deepspeed_configs"
case(2, f"--config {AX}/zero2.json --model llama2-7b --gpus 8", "give --batch", "item 1: micro-batch auto refused in plan")
case(2, f"--config {AX}/zero2.json --model llama2-7b --gpus 8 --batch 2", "give --grad-accum", "item 1: accumulation auto")
case(2, f"--config {AX}/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1", "give --precision", "item 1: bf16 auto")
case(0, f"--config {AX}/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1 --precision mixed-bf16", "-", "item 1: resolved by the command line")
case(2, f"--config {AX}/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1 --precision amp-bf16", "-", "item 1: a precision the file's bf16 cannot be")
case(0, f"auto --config {AX}/zero2.json --model llama2-7b --gpus 8 --seq 4096", "-", "item 1: auto searches the auto values")
case(0, f"auto --config {AX}/zero3_bf16.json --model llama2-7b --gpus 8 --seq 2048 --json", "-", "item 1: auto, JSON")

# ---- every real config (items 3, 5): plan, without a model, auto ----
with open(os.path.join(HERE, "..", "data", "configs", "SOURCES.tsv")) as f:
    src = [l.rstrip("\n").split("\t") for l in f if l.strip()]
for repo, path, commit in src:
    p = "$C/" + repo.replace("/", "+") + "/" + path
    toml = path.endswith(".toml")
    text = open(os.path.join(HERE, "..", "data", "configs", repo.replace("/", "+"), path)).read()
    auto_ds = path.endswith(".json") and '"auto"' in text
    named_auto = "deepspeed_config_file" in text
    m = "" if toml and "llama3" in path else " --model llama2-7b"
    if toml and "qwen3" in path:
        m = " --model $H/qwen3-32b.json"
    flags = " --batch 1 --grad-accum 1 --precision mixed-bf16" if auto_ds else ""
    case("02", f"--config {p}{m} --gpus 8{flags}", "-", f"real config {repo}:{path}")
    case("02", f"--config {p}{m} --gpus 8{flags} --json", "-", f"real config (JSON) {repo}:{path}")
    if not toml:
        case(2, f"--config {p} --gpus 8", "give --batch" if auto_ds or named_auto else "no model",
             f"real config without --model {repo}:{path}")
    case("02", f"auto --config {p}{m} --gpus 8 --seq 2048", "-", f"real config under auto {repo}:{path}")

# ---- recipes (item 3) and overrides (item 4) ----
R = "$C/huggingface+alignment-handbook/recipes"
LF = "$C/hiyouga+LLaMA-Factory/examples"
case(0, f"--config {R}/zephyr-7b-beta/sft/config_qlora.yaml --model $H/mistral-7b-v0.1.json --gpus 8", "-", "item 3: TRL QLoRA recipe")
case(0, f"--config {LF}/train_full/qwen3_full_sft.yaml --model $H/qwen3-8b.json --gpus 8", "-", "item 3: deepspeed pointer followed from the repo root")
case(0, f"--config $C/huggingface+accelerate/examples/config_yaml_templates/multi_node.yaml --model gpt2 --gpus 8", "-", "item 4: --gpus re-derives GPUs per node")
case(2, f"--config $C/huggingface+accelerate/examples/config_yaml_templates/multi_node.yaml --model gpt2 --gpus 7", "num_machines", "item 4: --gpus 7 over 2 machines")
TT = "$C/pytorch+torchtitan/torchtitan/models/llama3/train_configs"
case(0, f"--config {TT}/llama3_70b.toml --gpus 8 --tp 1", "-", "item 4: --tp 1 drops the file's derived --sp")
case("02", f"--config {TT}/llama3_8b.toml --gpus 8 --pp 2", "-", "item 4: --pp 2 with the file's accumulation")
case(2, f"--config {TT}/llama3_70b.toml --model llama2-7b --gpus 8", "flavor", "item 5: flavor 70B against an 8B --model")
case(0, f"--config {TT}/debug_model.toml --gpus 2", "-", "item 5: the flavor picks the model")
fixture("tt_pp.toml", "[training]\nlocal_batch_size = 8\nseq_len = 512\n[parallelism]\npipeline_parallel_degree = 2\ndata_parallel_shard_degree = 1\n[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n")
case(0, "--config $F/tt_pp.toml --gpus 2", "-", "item 5: pipeline degree mapped to --pp")
fixture("tt_pp_sched.toml", "[training]\nlocal_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"Interleaved1F1B\"\ndata_parallel_shard_degree = 1\n[model]\nflavor = \"debugmodel\"\n")
case(0, "--config $F/tt_pp_sched.toml --gpus 2", "-", "item 5: torchtitan's Interleaved1F1B read as --pp-schedule interleaved, 2 stages per rank")
for seq_key, kind in [("max_length: 3000", "trl"), ("max_seq_length: 3000", "trl"), ("cutoff_len: 3000\nstage: sft", "llama-factory"), ("sequence_len: 3000\nbase_model: x", "axolotl")]:
    n = fixture(f"seq_{kind}_{len(cases)}.yaml", f"{seq_key}\nper_device_train_batch_size: 1\n" if kind != "axolotl" else f"{seq_key}\nmicro_batch_size: 1\n")
    case(0, f"--config {n} --model llama2-7b --gpus 8 --json", "-", f"item 2: {kind} sequence key honoured")
fixture("hf_args.yaml", "output_dir: out\nper_device_train_batch_size: 4\nbf16: true\ngradient_checkpointing: true\n")
case(0, "--config $F/hf_args.yaml --model gpt2 --gpus 2", "-", "item 3: TrainingArguments as YAML")
fixture("trl_peft_q8.yaml", "model_name_or_path: x\nuse_peft: true\nload_in_8bit: true\nload_in_4bit: true\n")
case(2, "--config $F/trl_peft_q8.yaml --model llama2-7b", "both true", "TRL refuses 4 and 8 bit together")
fixture("trl_q_nopeft.yaml", "model_name_or_path: x\nload_in_4bit: true\n")
case(2, "--config $F/trl_q_nopeft.yaml --model llama2-7b", "use_peft", "TRL: a quantized base needs LoRA")
fixture("lf_bad_stage.yaml", "stage: rlhf\nfinetuning_type: lora\n")
case(2, "--config $F/lf_bad_stage.yaml --model llama2-7b", "stage", "LLaMA-Factory: an unknown stage")
fixture("lf_qfull.yaml", "stage: sft\nfinetuning_type: full\nquantization_bit: 4\n")
case(2, "--config $F/lf_qfull.yaml --model llama2-7b", "LoRA", "LLaMA-Factory refuses a quantized full fine-tune")
fixture("ax_loop.yaml", "base_model: x\ndeepspeed: ax_loop.yaml\n")
case(2, "--config $F/ax_loop.yaml --model llama2-7b", "-", "a deepspeed pointer to a YAML (itself)")
fixture("ax_missing.yaml", "base_model: x\ndeepspeed: nowhere/ds.json\n")
case(2, "--config $F/ax_missing.yaml --model llama2-7b", "not beside it", "a deepspeed pointer to nothing")
fixture("ax_dev.yaml", "base_model: x\ndeepspeed: /dev/zero\n")
case(2, "--config $F/ax_dev.yaml --model llama2-7b", "regular file", "a deepspeed pointer to a device")
fixture("ax_bigrank.yaml", "base_model: x\nadapter: lora\nlora_r: 100000\n")
case(2, "--config $F/ax_bigrank.yaml --model gpt2", "-", "axolotl lora_r above the flag's range")

# ---- bounds (item 9) ----
case(2, "--model gpt2 --lora 65536", "valid here: 1 to 768", "item 9: rank above a target's dimensions")
case(2, "--model gpt2 --lora 769", "valid here: 1 to 768", "item 9: rank just above")
case(0, "--model gpt2 --lora 768", "-", "item 9: rank at the bound")
case(2, "--model gpt2 --lora 0", "[1, 65536]", "item 9: rank 0")
case(0, "--model $H/llama-4-scout-17b-16e-text.json --moe-imbalance 2 --gpus 8", "changes nothing", "item 9: no-op flag said")
case(2, "--model gpt2 --gpus 2 --tp 2 --offload params", "offload", "item 9: --tp 2 --offload params, no peak inf")
case(2, "auto --model gpt2 --gpus 2 --tp 2 --offload params", "offload", "item 9: auto --tp 2 --offload params")
for f in ["--lora 8", "--freeze embeddings", "--quant-base nf4 --lora 8", "--lora-alpha 16", "--moe-imbalance 2", "--tp 2", "--pp 2", "--fsdp-min-params 100"]:
    case(2, f"run --model gpt2-tiny {f}", "-", f"item 9: run refuses {f}")
    case(2, f"validate --model gpt2-tiny {f}", "-", f"item 9: validate refuses {f}")
case(2, "validate --against torch --model gpt2-tiny --lora 8 --quant-base nf4", "quant-base", "item 9: validate --against torch refuses a 4-bit base")
# every numeric flag at, inside and outside its range: the message's range is the accepted one
RANGES = [("batch", 1, 1000000, 1), ("seq", 1, 10000000, 1), ("grad-accum", 1, 1000000, 1), ("gpus", 1, 1000000, 1),
          ("gpus-per-node", 1, 1024, 1), ("tp", 1, 1024, 1), ("pp", 1, 1024, 1), ("microbatches", 1, 1000000, 1),
          ("lora", 1, 65536, 1), ("units", 1, 100000, 1), ("dropout", 0, 0.999, 0), ("lora-dropout", 0, 0.999, 0),
          ("lora-alpha", 1e-6, 1e6, 0), ("mfu", 0.01, 1, 0), ("intra-bw", 0.001, 100000, 0), ("inter-bw", 0.001, 100000, 0), ("nics", 1, 64, 1),
          ("latency", 0, 10000, 0), ("ds-reduce-bucket", 1, 1e13, 0), ("ds3-prefetch", 0, 1e13, 0), ("ds3-max-live", 0, 1e13, 0),
          ("fsdp-min-params", 1, 1e16, 0), ("params", 1, 1e16, 0)]
for flag, lo, hi, integer in RANGES:
    below = lo - 1 if integer else (lo / 10 if lo > 0 else -0.001)
    above = hi + 1 if integer else hi * 1.001
    for v in [below, above, "nan", "inf", "-inf", "1e", "", "5 ", "1,000", "5x", "--5"]:
        if isinstance(v, float): v = repr(v)
        case(2, f"--model gpt2 --{flag} '{v}'", f"--{flag}", f"item 9: --{flag} {v!s} refused")
for flag, v in [("batch", "1"), ("gpus", "1"), ("dropout", "0"), ("dropout", "0.999"), ("lora-dropout", "0.999"), ("lora-alpha", "1e-6"),
                ("mfu", "1"), ("latency", "0"), ("ds-reduce-bucket", "1")]:
    extra = " --lora 8" if flag.startswith("lora-") else " --strategy zero2" if flag.startswith("ds") else ""
    case(0, f"--model gpt2 --{flag} {v}{extra}", "-", f"item 9: --{flag} {v} at its bound accepted")

# ---- emitters (item 7) ----
case(2, "auto --model gpt2 --gpus 8 --pp auto --emit deepspeed", "pipeline", "item 7: pp pick cannot be a DeepSpeed config")
case(2, "auto --model llama2-7b --gpus 8 --tp auto --emit deepspeed", "tensor parallel", "item 7: tp pick")
case(2, "auto --model llama2-7b --gpus 8 --tp 2 --emit deepspeed", "tensor parallel", "item 7: fixed tp")
case("01", "auto --model llama2-7b --gpus 8 --pp auto --emit torch", "-", "item 7: pp pick under --emit torch: refused in one line when picked")
case(0, "auto --model llama2-7b --gpus 8 --lora 16 --quant-base nf4 --emit deepspeed", "read back", "item 7: QLoRA config with its read-back")
case(0, "auto --model llama2-7b --gpus 8 --lora 16 --quant-base nf4 --precision fp32 --emit torch", "-", "item 7: QLoRA fp32 compute dtype")
case(0, "auto --model gpt2-xl --gpus 8 --alloc-conf expandable_segments:True --emit torch", "-", "item 7: allocator settings emitted")
case(2, "auto --model gpt2 --gpus 2 --emit deepspeed --json", "--emit", "emit with --json")
case(2, "--model gpt2 --emit torch", "auto", "emit belongs to auto")
case(2, "auto --model gpt2 --emit onnx", "valid: deepspeed, torch", "unknown emit")

# ---- quantized bases under every strategy (item 8) ----
for st in ["ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"]:
    for q in ["none", "bf16", "int8", "nf4"]:
        exp = 2 if (q == "int8" and st in ("zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid")) else 0
        case(exp, f"--model llama2-7b --gpus 8 --lora 16 --quant-base {q} --strategy {st} --json", "-", f"item 8: {st} with {q}")

# ---- models (issue 25) ----
for fn in sorted(os.listdir(os.path.join(HERE, "..", "data", "hf"))):
    if fn.endswith(".json") and fn != "counts.json":
        case("02", f"--model $H/{fn} --gpus 8 --json", "-", f"issue 25: {fn}")
for fn in sorted(os.listdir(os.path.join(HERE, "..", "data", "bad"))):
    case(2, f"--model $D/bad/{fn}", "-", f"issue 25: bad model {fn}")

# ---- fine-tuning, tp/pp, auto (issues 26, 29, 23) ----
for m in ["gpt2", "llama2-7b", "$H/qwen3-8b.json", "$H/mixtral-8x7b-v0.1.json"]:
    for f in ["--lora 8", "--lora 8 --lora-targets all-linear", "--lora 8 --lora-targets nope", "--freeze embeddings",
              "--freeze all-but-last:2", "--freeze all-but-last:100000", "--lora 8 --freeze embeddings", "--quant-base nf4",
              "--tp 2", "--tp 3", "--pp 2", "--pp 7", "--tp 2 --pp 2", "--tp 2 --lora 8", "--pp 2 --lora 8", "--sp on",
              "--tp 2 --sp on", "--pp 2 --grad-accum 4", "--pp 2 --microbatches 1", "--pp 2 --microbatches 4 --pp-schedule gpipe"]:
        case("02", f"--model {m} --gpus 8 {f}", "-", f"fine-tuning / tp / pp: {m} {f}")
    case("02", f"auto --model {m} --gpus 8 --tp auto --pp auto", "-", f"auto over tp and pp: {m}")
    case("02", f"auto --model {m} --gpus 8 --lora 16 --global-batch 64", "-", f"auto LoRA global batch: {m}")

# ---- alloc (issue 28) ----
A = "$D/alloc/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt"
case(0, f"alloc {A}", "-", "alloc: a recorded trace")
case(2, "alloc /dev/zero", "not a regular file", "item 6: alloc /dev/zero never returned")
case(2, "alloc $T/fifo", "not a regular file", "item 6: alloc FIFO")
case(2, f"alloc {A} /dev/null", "not a regular file", "item 6: no partial stdout when the second trace fails")
case(2, "alloc $T", "folder", "alloc a folder")
fixture("trace_huge.txt", "a 10 18446744073709551615\nf 10\n")
case(2, "alloc $F/trace_huge.txt", "2^50", "int64 sizes refused")
fixture("trace_neg.txt", "a 10 -5\n")
case(2, "alloc $F/trace_neg.txt", "-", "negative size")
fixture("trace_nul.txt", "a 10 100\n\0\0\0\n")
case(2, "alloc $F/trace_nul.txt", "not text", "NUL bytes")
fixture("trace_free.txt", "f 10\nf 20\n")
case(0, "alloc $F/trace_free.txt", "-", "frees of nothing")
case(0, f"alloc --alloc-conf '' {A}", "-", "alloc: an empty conf is torch's defaults")
for conf in ["garbage", "expandable_segments:maybe", "roundup_power2_divisions:0"]:
    case(2, f"alloc --alloc-conf '{conf}' {A}", "-", f"alloc conf {conf!r}")
case(0, f"alloc --alloc-conf 'max_split_size_mb:-1' {A}", "-", "alloc conf max_split_size_mb:-1 read as torch reads it (std::stoull wraps the minus: no limit)")
for cap in ["0", "1", "1MiB", "2000GiB", "-5GiB", "nanGiB"]:
    case("02", f"alloc --capacity {cap} {A}", "-", f"alloc capacity {cap}")

# ---- misc options (issue 23) ----
for a in ["--json=/nonexistent/dir/x.json", "--json=$T", "--trace=/nonexistent/t.json", "--plot $T/x.txt",
          "--strategy all,ddp", "--strategy ''", "--strategy zero4", "--gpu h900", "--gpu-mem 1KiB", "--cuda-context 5",
          "--alloc-margin 95%", "--alloc-margin 5", "--batch 1 --batch 2", "--config-kind deepspeed", "--config-kind onnx --config x",
          "--model gpt2 --params 1e9", "--units 4", "unknowncmd", "--model", "--help-me"]:
    case(2, f"--model gpt2 {a}" if not a.startswith("unknowncmd") else a, "-", f"misc: {a}")

# ---- pipeline schedules (issue 35) ----
fixture("tt_pp_zb.toml", "[training]\nlocal_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"InterleavedZeroBubble\"\ndata_parallel_shard_degree = 1\n[model]\nflavor = \"debugmodel\"\n")
case(0, "--config $F/tt_pp_zb.toml --gpus 2", "InterleavedZeroBubble", "issue 35: a schedule memplan does not plan is named")
for a in ["--pp-virtual 2", "--pp 2 --pp-virtual 1 --pp-schedule interleaved", "--pp 2 --pp-virtual 99 --pp-schedule interleaved",
          "--pp 2 --pp-less-first -1", "--pp 2 --pp-less-first 40", "--pp 4 --pp-schedule interleaved --microbatches 9",
          "--pp 2 --pp-return-outputs maybe", "--pp-return-outputs off"]:
    case(2, f"--model llama2-7b --gpus 4 {a}", "-", f"pp: {a}")

with open(os.path.join(HERE, "cases.tsv"), "w") as f:
    f.write("# generated by tests/hostile/gen_cases.py: EXPECT, ARGS, WORDS, NOTE\n")
    for c in cases:
        f.write("\t".join(c) + "\n")
print(f"{len(cases)} cases")
