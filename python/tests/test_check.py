"""memplan.check and the Trainer callback plan the run about to start from the objects and the
environment it has, and stop it before its first step when the planned peak does not fit."""
import warnings

import pytest

import memplan
from memplan._check import environment


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for v in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(v, raising=False)


def test_a_setup_that_fits_passes_and_returns_its_plan():
    p = memplan.check(model="gpt2", gpus=2, gpu_mem="80GiB")
    assert [s["name"] for s in p["strategies"]] == ["ddp"]   # no config: the plain script's DDP
    assert p["strategies"][0]["fits"]


def test_a_setup_that_does_not_fit_raises_with_the_table_and_autos_changes():
    with pytest.raises(memplan.OutOfMemoryPlanError) as e:
        memplan.check(model="gpt2-xl", gpus=8, gpu="a100-40gb", batch=4)
    text = str(e.value)
    plan, pick = e.value.plan, e.value.suggestion
    row = plan["strategies"][0]
    assert not row["fits"] and f"{row['memory']['peak'] / 2**30:.2f} GiB" in text
    assert "ddp " in text and "OOM" in text                     # the table's row
    assert pick["auto"]["found"]
    rec = pick["recommendation"]
    assert f"--strategy {rec['strategy']}" in text and rec["strategy"] != "ddp"
    assert "--batch" not in text                                 # auto keeps the batch it was given
    chosen = next(s for s in pick["strategies"] if s["name"] == rec["strategy"])
    assert chosen["fits"]


def test_warn_goes_on_with_a_plan_warning():
    with pytest.warns(memplan.PlanWarning, match="will run out of memory"):
        p = memplan.check(model="gpt2-xl", gpus=8, gpu="a100-40gb", batch=4, on_fail="warn", suggest=False)
    assert not p["strategies"][0]["fits"]


def test_the_world_size_comes_from_torchruns_variables(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    env = environment()
    assert (env["gpus"], env["gpus_per_node"]) == (16, 4)
    p = memplan.check(model="gpt2", gpu_mem="80GiB")
    assert (p["cluster"]["gpus"], p["cluster"]["gpus_per_node"]) == (16, 4)
    p = memplan.check(model="gpt2", gpus=2, gpu_mem="80GiB")     # an option wins
    assert p["cluster"]["gpus"] == 2


def test_training_arguments_are_read_as_the_trainers_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4,
                                          gradient_accumulation_steps=2, activation_checkpointing=True, use_cpu=True,
                                          report_to=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", memplan.PlanWarning)
        p = memplan.check(args, model="gpt2", gpu_mem="80GiB")
    assert p["config"]["kind"] == "hf-trainer" and p["config"]["file"] == "<TrainingArguments>"
    assert (p["train"]["micro_batch"], p["train"]["grad_accum"], p["train"]["act_ckpt"]) == (4, 2, "full")


def test_an_accelerator_is_read_as_its_accelerate_config():
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", memplan.PlanWarning)
        p = memplan.check(acc, model="gpt2", gpu_mem="80GiB")
    assert p["config"]["kind"] == "accelerate" and p["train"]["grad_accum"] == 4


def tiny_trainer(tmp_path, callback):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64,
                                                                 vocab_size=256))
    data = [{"input_ids": torch.randint(0, 256, (32,)), "labels": torch.randint(0, 256, (32,))} for _ in range(8)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=2,
                                          use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no")

    class Steps(transformers.TrainerCallback):
        taken = 0

        def on_step_begin(self, args, state, control, **kw):
            Steps.taken += 1

    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback, Steps()])
    return trainer, Steps


def test_the_callback_stops_a_real_trainer_before_its_first_step_when_the_gpu_is_too_small(tmp_path):
    from memplan.integrations.transformers import MemplanCallback
    cb = MemplanCallback(gpu_mem="512MiB", seq=32)
    trainer, steps = tiny_trainer(tmp_path, cb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", memplan.PlanWarning)
        with pytest.raises(memplan.OutOfMemoryPlanError, match="will run out of memory"):
            trainer.train()
    assert steps.taken == 0 and trainer.state.global_step == 0


def test_the_callback_lets_a_run_that_fits_train(tmp_path):
    from memplan.integrations.transformers import MemplanCallback
    cb = MemplanCallback(gpu_mem="80GiB", seq=32)
    trainer, steps = tiny_trainer(tmp_path, cb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", memplan.PlanWarning)
        trainer.train()
    assert steps.taken == 2 and cb.plan["strategies"][0]["fits"]
    assert cb.plan["model"]["params"] == sum(p.numel() for p in trainer.model.parameters())
    assert (cb.plan["train"]["micro_batch"], cb.plan["train"]["seq"]) == (2, 32)
