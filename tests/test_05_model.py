"""Lesson 05, in one process: the GPT is initialised, grouped and tied as the lesson says
and samples reproducibly; the config and the data refuse bad input in one line. (That it is
causal: the notebook's cell after `CausalSelfAttention`.)"""

import inspect
import math

import pytest
import torch
from conftest import REPO, lesson_module, run_forked

LESSON = REPO / "05_mingpt"
MAIN, CONFIG = LESSON / "main.py", LESSON / "train_cfg.yaml"

char_dataset = lesson_module("05_mingpt", "char_dataset")
gpt = lesson_module("05_mingpt", "model")
lesson_config = lesson_module("05_mingpt", "config")
ConfigError, load_config = lesson_config.ConfigError, lesson_config.load_config


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: a second thread only waits, and fights the other worker."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_gpt(seed: int = 0, **changes) -> gpt.GPT:
    torch.manual_seed(seed)
    shape = dict(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
    return gpt.GPT(gpt.GPTShape(**(shape | changes))).eval()


def test_initial_loss_is_that_of_a_uniform_guess_and_projections_are_scaled():
    model = small_gpt(n_layer=4, n_embd=64)
    tokens = torch.randint(0, 50, (8, 32), generator=torch.Generator().manual_seed(1))
    _, loss = model(tokens, tokens)
    assert abs(loss.item() - math.log(50)) < 0.05  # small weights: nearly uniform logits
    for name, parameter in model.named_parameters():
        if name.endswith("proj.weight"):
            assert abs(parameter.std().item() - 0.02 / math.sqrt(2 * 4)) < 0.002, name
        elif name.endswith("bias") and "ln" not in name:
            assert torch.count_nonzero(parameter) == 0, name


@pytest.mark.parametrize("tied", [False, True])
def test_weight_decay_applies_to_linear_matrices_only_and_a_tied_one_once(tied):
    model = small_gpt(tie_weights=tied)
    decay, no_decay = model.optimizer_groups(weight_decay=0.1)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    grouped = [id(p) for group in (decay, no_decay) for p in group["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())  # each exactly once
    linear = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    # Decayed: the 2 blocks' qkv, proj, fc, proj and lm_head, every linear matrix alone.
    assert {id(p) for p in decay["params"]} == linear and len(linear) == 2 * 4 + 1
    kept = {id(p) for p in no_decay["params"]}
    assert {id(model.position_embedding.weight), id(model.ln_f.weight)} <= kept
    assert (id(model.token_embedding.weight) in kept) != tied  # tied: lm_head's matrix
    assert (model.lm_head.weight is model.token_embedding.weight) == tied
    if tied:  # one matrix, counted once
        counts = [sum(p.numel() for p in m.parameters()) for m in (small_gpt(), model)]
        assert counts[0] - counts[1] == 50 * 32
    torch.optim.AdamW([decay, no_decay])  # accepts them (a parameter in two groups raises)


def test_generate_is_reproducible_and_top_1_is_greedy():
    model = small_gpt()
    prompt = torch.tensor([[1, 2, 3]])

    def sample(seed, **options):
        return model.generate(prompt, 40, generator=torch.Generator().manual_seed(seed), **options)

    assert sample(0).shape == (1, 43) and torch.equal(sample(0)[:, :3], prompt)  # longer
    assert torch.equal(sample(0), sample(0))  # than block_size: the context is cropped
    assert not torch.equal(sample(0), sample(1))
    greedy = prompt
    for _ in range(40):
        logits, _ = model(greedy[:, -32:])
        greedy = torch.cat([greedy, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(sample(5, top_k=1), greedy)
    assert torch.equal(sample(5, top_k=1, temperature=0.1), greedy)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample(0, temperature=0)


def test_precision_states_float16s_limits_as_this_pytorch_has_them():
    precision = lesson_module("05_mingpt", "precision")
    half, bf16, fp32 = (torch.finfo(t) for t in (torch.float16, torch.bfloat16, torch.float32))
    # float16: normal from 2^-14, subnormal steps of 2^-24.
    assert half.smallest_normal == 2**-14 and "2^-14" in precision.__doc__
    assert half.max == 65504 and "65504" in precision.__doc__
    smallest = torch.tensor(2.0**-24, dtype=torch.float16)
    assert smallest > 0 and smallest / 2 == 0 and "2^-24" in precision.__doc__
    assert "(2^-14)" in precision.float16_range() and "(2^-24)" in precision.float16_range()
    # bfloat16 has float32's smallest normal number; GradScaler starts at 2^16.
    assert bf16.smallest_normal == fp32.smallest_normal == 2**-126
    assert "2^-126" in precision.__doc__ and "2^16" in precision.__doc__
    init_scale = inspect.signature(torch.amp.GradScaler).parameters["init_scale"].default
    assert init_scale == 2**16


def test_config_overrides_are_typed():
    config = load_config(CONFIG, ["trainer.max_epochs=7", "optimizer.lr=1e-4", "optimizer.min_lr=0",
                                  "trainer.amp=fp32", "trainer.sample_prompt=42",
                                  "data.path=notes.txt"])  # fmt: skip
    assert config.trainer.max_epochs == 7 and config.optimizer.lr == 1e-4
    assert config.trainer.amp == lesson_config.Amp.fp32 and config.trainer.sample_prompt == "42"
    assert config.data.path == "notes.txt" and config.model.n_layer == 4  # from the YAML


@pytest.mark.parametrize(
    "override, message",
    [  # OmegaConf's refusals (a key or a type), then config.check's (a value); a misspelt
        # name in a section, through main.py: test_scripts' WRONG_VALUES
        ("traner.max_epochs=3", "unknown setting traner: Key 'traner' not in 'Config'"),
        ("optimizer.lr=fast", "bad value for optimizer.lr: Value 'fast' of type 'str' could"),
        ("trainer.max_epochs=2.5", "bad value for trainer.max_epochs: Value '2.5' of type"),
        ("trainer.amp=off", "bad value for trainer.amp: Invalid value 'False', expected one"),
        ("max_epochs", "unknown setting max_epochs"),
        ("model.n_head=0", "model.n_head=0 must be > 0"),
        ("model.n_head=5", "model.n_embd=128 must be divisible by model.n_head=5"),
        ("model.dropout=1", "model.dropout=1.0 must be in [0, 1)"),
    ],
)
def test_bad_settings_are_refused(override, message):
    with pytest.raises(ConfigError, match=None) as error:
        load_config(CONFIG, [override])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_validation_is_the_texts_tail_and_training_windows_depend_on_seed_epoch_index():
    text, _ = char_dataset.load_text(None)
    vocabulary, train, val, _ = char_dataset.build_datasets(None, 64, 0.1, 1337)
    held_out = int(0.1 * len(text))
    # A contiguous split: no validation window shares a sentence with a training one.
    assert vocabulary.decode(val.data) == text[-held_out:]
    assert vocabulary.decode(train.data) == text[:-held_out]
    assert vocabulary.decode(val[1][0]) == text[-held_out + 64 : -held_out + 128]

    # Another rank builds the same offsets for every epoch; each epoch draws new ones.
    _, again, _, _ = char_dataset.build_datasets(None, 64, 0.1, 1337)
    _, other_seed, _, _ = char_dataset.build_datasets(None, 64, 0.1, 1338)
    offsets = {}
    for epoch in (0, 1, 7):
        for dataset in (train, again, other_seed):
            dataset.set_epoch(epoch)
        assert torch.equal(train.offsets, again.offsets)
        assert not torch.equal(train.offsets, other_seed.offsets)
        offsets[epoch] = train.offsets.clone()
    assert not torch.equal(offsets[0], offsets[1]) and not torch.equal(offsets[1], offsets[7])
    # Window i of an epoch is the text at offset i, its target shifted by one character;
    # every offset leaves room for a whole window.
    start = int(train.offsets[5])
    inputs, targets = train[5]
    assert vocabulary.decode(inputs) == text[start : start + 64]
    assert vocabulary.decode(targets) == text[start + 1 : start + 65]
    assert 0 <= int(train.offsets.min()) and int(train.offsets.max()) <= len(train.data) - 65
    assert len(train) == (len(train.data) - 1) // 64  # an epoch: as many windows as blocks


def test_bad_data_files_get_one_line(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("to be or not to be\n" * 20)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 1000)
    complaints = {
        "missing.txt": "--data missing.txt: no such file",
        "empty.txt": "--data empty.txt: the file is empty",
        "short.txt": "is too short: 380 characters hold out 38 for validation (0.1), too few",
        "latin1.txt": "not UTF-8 text (byte 3 cannot be decoded)",
    }
    commands = [(MAIN, ["--data", name]) for name in complaints]
    for complaint, result in zip(complaints.values(), run_forked(commands, tmp_path), strict=True):
        # Exit status 2 and exactly one line on stderr, naming the file and the problem.
        assert result["status"] == 2 and result["stdout"] == "", result
        assert result["stderr"].count("\n") == 1 and complaint in result["stderr"], result
        assert "launch it as: torchrun --standalone --nproc_per_node=2 main.py" in result["stderr"]
