"""memplan.plan / auto / models / gpus hold the command line's semantics: for every setup of the
matrix the document is the one `memplan ... --json` writes, refusals are its one-line errors, and
a plan prints as its table."""
import json
import os
import warnings

import pytest

import memplan
from memplan import _memplan as ext

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")

# (command, options): each is run as memplan.<command>(**options) and as the command line the
# options document amounts to (that line is checked by hand in test_the_options_become_the_flags...)
MATRIX = [
    ("plan", dict(model="gpt2-xl", gpus=8)),
    ("plan", dict(model="gpt2-xl", gpus=8, act_ckpt="full", batch=4, strategy=["ddp", "zero3"])),
    ("plan", dict(model="llama2-7b", gpus=16, gpus_per_node=8, gpu="h100-80gb", precision="mixed-bf16", seq=4096)),
    ("plan", dict(model="llama2-7b", gpus=8, tp=2, sp="on", strategy="fsdp-full")),
    ("plan", dict(model="llama2-7b", gpus=8, pp=4, microbatches=8, strategy="ddp")),
    ("plan", dict(model="llama2-7b", gpus=2, lora=16, lora_targets=["q_proj", "v_proj"], quant_base="nf4")),
    ("plan", dict(model="resnet50", gpus=4, batch=16, syncbn=True)),
    ("plan", dict(params=7.5e9, units=16, gpus=8, gpu_mem="80GiB", mfu=0.4)),
    ("plan", dict(model=os.path.join(DATA, "hf", "t5-base.json"), gpus=4, offload="optimizer", strategy="zero2")),
    ("plan", dict(model="mixtral-8x7b", gpus=8, gpu="h100-80gb", moe_imbalance=1.5)),
    ("auto", dict(model="gpt2-xl", gpus=8)),
    ("auto", dict(model="llama2-7b", gpus=8, gpu="a100-80gb", global_batch=64)),
    ("auto", dict(model="llama2-7b", gpus=8, tp="auto")),
]


def cli_args(command, options):
    """The command line of an options document, without the program's name."""
    args, msg = ext.argv(command, json.dumps(options), True)
    assert args is not None, msg
    return args[1:]


@pytest.mark.parametrize("command,options", MATRIX, ids=[f"{c}-{i}" for i, (c, _) in enumerate(MATRIX)])
def test_the_document_is_the_command_lines_for_every_setup_of_the_matrix(cli, command, options):
    got = getattr(memplan, command)(**options)
    assert isinstance(got, dict)
    assert got == cli.json(cli_args(command, options))


def test_the_options_become_the_flags_a_user_would_type():
    args = cli_args("plan", dict(model="gpt2-xl", gpus=8, act_ckpt="full", strategy=["ddp", "zero3"], mfu=0.4,
                                 params=7.5e9, syncbn=True, grad_as_bucket_view=False, sp=True, lora=None))
    assert args == ["plan", "--json", "--model=gpt2-xl", "--gpus=8", "--act-ckpt=full", "--strategy=ddp,zero3",
                    "--mfu=0.4", "--params=7500000000", "--syncbn", "--sp=on"]


def test_the_json_documents_are_byte_for_byte_the_command_lines(cli):
    rc, out, err, msg = ext.run("plan", json.dumps({"model": "llama2-7b", "gpus": 8}), True)
    assert rc == 0 and msg == ""
    assert out == cli.run(["plan", "--json", "--model=llama2-7b", "--gpus=8"]).stdout


def test_a_plan_prints_as_the_command_lines_table(cli):
    p = memplan.plan("gpt2-xl", gpus=8, strategy="ddp,zero3")
    assert str(p) == cli.run(["--model", "gpt2-xl", "--gpus", "8", "--strategy", "ddp,zero3"]).stdout
    assert p.argv == ["memplan", "plan", "--model=gpt2-xl", "--gpus=8", "--strategy=ddp,zero3"]
    explained = p.table(explain=True)
    assert explained == cli.run(["--model", "gpt2-xl", "--gpus", "8", "--strategy", "ddp,zero3", "--explain"]).stdout


def test_auto_prints_as_the_command_lines_auto_report(cli):
    a = memplan.auto("gpt2-xl", gpus=8)
    assert str(a) == cli.run(["auto", "--model", "gpt2-xl", "--gpus", "8"]).stdout
    assert a["auto"]["found"] and a["recommendation"]["strategy"] == a["auto"]["strategy"]


@pytest.mark.parametrize("options,flags", [
    (dict(model="gpt2-xl", act_ckpt="bogus"), ["--model", "gpt2-xl", "--act-ckpt", "bogus"]),
    (dict(model="gpt2-xl", gpus=0), ["--model", "gpt2-xl", "--gpus", "0"]),
    (dict(model="gpt2-xl", gpu="a100"), ["--model", "gpt2-xl", "--gpu", "a100"]),
    (dict(model="gpt2-xxl"), ["--model", "gpt2-xxl"]),
    (dict(model="gpt2-xl", global_batch=64), ["--model", "gpt2-xl", "--global-batch", "64"]),
    (dict(model="gpt2-xl", gpus=8, tp=3), ["--model", "gpt2-xl", "--gpus", "8", "--tp", "3"]),
    (dict(gpus=8), ["--gpus", "8"]),
])
def test_a_refused_setup_raises_the_command_lines_one_line_error(cli, options, flags):
    r = cli.run(flags)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert line.startswith("memplan: ") and "\n" not in line
    with pytest.raises(memplan.PlanError) as e:
        memplan.plan(**options)
    assert str(e.value) == line[len("memplan: "):]


def test_an_unknown_option_is_refused_by_its_name_with_the_valid_ones():
    for bad in ("foo_bar", "mod", "json", "help"):   # mod: getopt would take it as --model
        with pytest.raises(memplan.PlanError, match=rf"^unknown option '{bad}' for plan \(valid: model, revision, "):
            memplan.plan("gpt2-xl", **{bad: 1})
    with pytest.raises(memplan.PlanError, match="option 'strategy': a list of strings or numbers"):
        memplan.plan("gpt2-xl", strategy=[["ddp"]])
    with pytest.raises(memplan.PlanError, match="option 'syncbn' is a switch"):
        memplan.plan("gpt2-xl", syncbn="yes")


def test_a_model_given_as_a_dict_or_a_path_plans_as_the_file_does(cli, tmp_path):
    path = os.path.join(DATA, "hf", "qwen2-0.5b.json")
    with open(path) as f:
        doc = json.load(f)
    from_file = memplan.plan(path, gpus=2)
    from_dict = memplan.plan(doc, gpus=2)
    assert from_file == cli.json(["--model", path, "--gpus", "2", "--json"])
    # a dict has no file name: it is named by its model_type (a file without _name_or_path, by its name)
    assert (from_dict["model"]["source"], from_dict["model"]["name"]) == ("<model dict>", "qwen2")
    from_dict["model"].update(source=from_file["model"]["source"], name=from_file["model"]["name"])
    assert from_dict == from_file


def test_a_config_given_as_a_dict_plans_as_the_file_does(cli, tmp_path):
    ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ds))
    from_file = memplan.plan("gpt2-xl", 8, config=path)
    assert from_file == cli.json(["--model", "gpt2-xl", "--gpus", "8", "--config", str(path), "--json"])
    from_dict = memplan.plan("gpt2-xl", 8, config=ds)
    assert from_dict["config"]["file"] == "<config dict>"
    from_dict["config"]["file"] = str(path)
    assert from_dict == from_file


def test_a_torchtitan_config_given_as_a_dict_is_read_as_its_toml(cli, tmp_path):
    tt = {"job": {"dump_folder": "./outputs"}, "training": {"local_batch_size": 2, "seq_len": 2048, "mixed_precision_param": "bfloat16"},
          "parallelism": {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 2},
          "activation_checkpoint": {"mode": "full"}}
    got = memplan.plan("llama2-7b", 8, config=tt)
    assert got["config"]["kind"] == "torchtitan"
    path = tmp_path / "train.toml"
    path.write_text(memplan._inputs._toml(tt))
    want = cli.json(["--model", "llama2-7b", "--gpus", "8", "--config", str(path), "--json"])
    got["config"]["file"] = want["config"]["file"]
    assert got == want


def test_an_accelerate_yaml_config_is_read_by_the_vendored_libyaml_as_by_the_program(cli, tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\n"
                    "fsdp_config:\n  fsdp_version: 2\n  fsdp_activation_checkpointing: true\n  fsdp_reshard_after_forward: true\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", memplan.PlanWarning)
        got = memplan.plan("llama2-7b", config=str(path))
    assert got["config"]["kind"] == "accelerate"
    assert got == cli.json(["--model", "llama2-7b", "--config", str(path), "--json"])


def test_the_command_lines_warnings_become_plan_warnings(cli, tmp_path):
    ds = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, "wall_clock_breakdown": True,
          "some_unknown_key": 3}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    r = cli.run(["--model", "gpt2", "--config", str(path), "--json"])
    assert r.returncode == 0 and r.stderr.startswith("memplan: ")
    with pytest.warns(memplan.PlanWarning) as w:
        memplan.plan("gpt2", config=str(path))
    assert [str(x.message) for x in w] == [ln[len("memplan: "):] for ln in r.stderr.splitlines()]


def test_models_and_gpus_list_what_the_command_line_lists(cli):
    assert memplan.models() == cli.json(["models", "--json"])
    assert memplan.models(family="llama2") == cli.json(["models", "--family", "llama2", "--json"])
    assert memplan.gpus() == cli.json(["gpus", "--json"])
    with pytest.raises(memplan.PlanError, match="--family 'nope': no such family"):
        memplan.models(family="nope")


def test_the_package_version_is_the_programs(cli):
    assert cli.run(["--version"]).stdout == f"memplan {memplan.__version__}\n"


def test_to_pandas_has_a_row_per_strategy_with_the_documents_figures():
    pd = pytest.importorskip("pandas")
    p = memplan.plan("gpt2-xl", gpus=8)
    df = p.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert list(df.index) == [s["name"] for s in p["strategies"]]
    for s in p["strategies"]:
        assert df.loc[s["name"], "memory.peak"] == s["memory"]["peak"]
        assert df.loc[s["name"], "time.step_s"] == s["time"]["step_s"]


def test_the_timeline_is_the_traces_and_its_peak_is_the_plans():
    p = memplan.plan("gpt2", gpus=2, strategy="ddp,zero3")
    tl = p.timeline()
    assert set(tl) == {"ddp", "zero3"}
    for s in p["strategies"]:
        points = tl[s["name"]]
        assert len(points) > 10 and all(b[0] >= a[0] for a, b in zip(points, points[1:]))
        # the simulated curve's highest point is the tensors' peak (the allocator's margin is not a tensor)
        top = max(sum(v.values()) for _, v in points)
        assert 0.5 * s["memory"]["peak"] < top <= s["memory"]["peak"] * 1.0001


def test_plot_draws_the_breakdown_and_the_step_into_a_file(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    p = memplan.plan("gpt2", gpus=2, strategy="ddp,zero3")
    fig = p.plot(str(tmp_path / "plan.png"))
    assert len(fig.axes) == 2 and len(fig.axes[1].lines) >= 3   # ddp, zero3, capacity
    assert (tmp_path / "plan.png").stat().st_size > 10000
