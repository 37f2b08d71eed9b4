"""What a file's name alone says it is (hfdoctor.repo.file_names)."""

import pytest

from hfdoctor.repo.file_names import browser_duplicate_of, is_training_state


@pytest.mark.parametrize("name", ["training_args.bin", "optimizer.pt", "rng_state_3.pth",
                                  "global_step500/mp_rank_00_model_states.pt", "training_args (1).bin",
                                  "scheduler (2).pt", "ckpt/rng_state (1).pth"])
def test_trainer_state_also_under_a_browser_duplicate_name(name):
    assert is_training_state(name)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "pytorch_model (1).bin", "model (3).safetensors",
                                  "adapter_model.bin"])
def test_weights_are_not_trainer_state(name):
    assert not is_training_state(name)


def test_browser_duplicate_of():
    assert browser_duplicate_of("config (4).json") == "config.json"
    assert browser_duplicate_of("sub/tokenizer(1).json") == "sub/tokenizer.json"
    assert browser_duplicate_of("config.json") is None
