"""A transformers PretrainedConfig of every family the loader knows plans as its config.json does
on the command line, with the parameter count of the model transformers builds from it."""
import json
import os
import re
import warnings

import pytest

import memplan

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

# planner/plan_load_hf.c's HF_TYPES, each with the Auto class its counts are checked against
FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "gemma", "qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "granite",
            "smollm3", "starcoder2", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4_text",
            "gpt_neox", "opt", "bert", "t5"]
AUTO = {"bert": "AutoModelForMaskedLM", "t5": "AutoModelForSeq2SeqLM"}


def small_config(family):
    # small shapes; a vocabulary above every family's special token ids (smollm3 pads with 128004)
    return transformers.AutoConfig.for_model(family, num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                             vocab_size=131072)


def test_the_list_is_every_family_the_loader_knows(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "no-such-family"}))
    err = cli.run(["--model", str(path)]).stderr   # "... (supported: gpt2, llama, ...; nearest: ...)"
    assert re.search(r"\(supported: ([^;)]*)", err).group(1).split(", ") == FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_a_pretrained_config_plans_as_its_config_json_with_transformers_parameter_count(cli, tmp_path, family):
    cfg = small_config(family)
    got = memplan.plan(cfg, gpus=2)
    assert got["model"]["source"] == f"<{type(cfg).__name__}>"
    folder = tmp_path / family      # the folder names a config.json without _name_or_path, as the package's
    folder.mkdir()
    cfg.to_json_file(str(folder / "config.json"), use_diff=False)
    want = cli.json(["--model", str(folder / "config.json"), "--gpus", "2", "--json"])
    got["model"]["source"] = want["model"]["source"]
    assert got == want
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, AUTO.get(family, "AutoModelForCausalLM")).from_config(cfg)
    assert got["model"]["params"] == sum(p.numel() for p in model.parameters())
