"""The set-up's unpacking and packing in a child process (pair/child_steps.py): the same files as the
server's own process makes, a cancel at a checkpoint that leaves nothing staged, and a child that
fails or dies told as an error of the same kind, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_kquant import write_kquant_gguf
from tiny_gguf import tiny_qwen2, write_gguf

from specviz.errors import SpecVizError
from specviz.pair import kquant, unpack
from specviz.pair.child_steps import ChildSteps
from specviz.pair.wheel_parts import SETUP_COMMAND, SetUpCancelled

pytestmark = pytest.mark.slow  # a child process imports torch (2-4 s)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("child-steps")
    write_gguf(tiny_qwen2(), folder / "tiny.gguf")
    write_kquant_gguf(folder / "kquant.gguf")
    return folder


@pytest.fixture(scope="module")
def child():
    """One child for the tests that leave it alive: it takes step after step, after a cancel or an
    error too, as a set-up of two models needs."""
    with ChildSteps() as steps:
        yield steps


def staged(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_the_child_makes_the_files_the_server_would(gguf, tmp_path, child):
    checkpoints = []
    child.unpack(gguf, "tiny.gguf", tmp_path / "child", lambda: checkpoints.append(1))
    child.pack(gguf / "kquant.gguf", tmp_path / "child.safetensors")
    unpack.unpack_gguf(gguf, "tiny.gguf", tmp_path / "here")
    kquant.pack_gguf(gguf / "kquant.gguf", tmp_path / "here.safetensors")

    assert len(checkpoints) == 2  # after reading, after saving: where a cancel can stop it
    assert sorted(p.name for p in (tmp_path / "child").iterdir()) == sorted(p.name for p in (tmp_path / "here").iterdir())
    ours, theirs = (load_file(tmp_path / name / "model.safetensors") for name in ("child", "here"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    packed_there, packed_here = (kquant.read_packed(tmp_path / f"{name}.safetensors") for name in ("child", "here"))
    assert packed_there.keys() == packed_here.keys() and len(packed_there) == 4
    assert all(torch.equal(packed_there[k].weights(), packed_here[k].weights()) for k in packed_there)
    assert staged(tmp_path) == []


@pytest.mark.parametrize("at_checkpoint", [1, 2], ids=["read-not-saved", "saved-not-renamed"])
def test_a_cancel_at_a_checkpoint_leaves_nothing_staged(gguf, tmp_path, child, at_checkpoint):
    calls = []

    def cancel_there() -> None:
        calls.append(1)
        if len(calls) == at_checkpoint:
            raise SetUpCancelled("cancelled")

    with pytest.raises(SetUpCancelled):
        child.unpack(gguf, "tiny.gguf", tmp_path / "out", cancel_there)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its staging copy


def test_a_child_that_dies_is_one_line_and_the_next_unpacking_clears_what_it_staged(gguf, tmp_path):
    with ChildSteps() as child:
        def killed_after_saving() -> None:  # the second checkpoint: its staging folder is written
            if staged(tmp_path):
                child._child.kill()
                child._child.wait()

        with pytest.raises(SpecVizError, match=r"ended with code -9 \(signal 9: most often the memory") as raised:
            child.unpack(gguf, "tiny.gguf", tmp_path / "out", killed_after_saving)
    assert "\n" not in str(raised.value) and SETUP_COMMAND in str(raised.value)
    assert len(staged(tmp_path)) == 1 and not (tmp_path / "out").exists()
    unpack.unpack_gguf(gguf, "tiny.gguf", tmp_path / "out")  # a dead process's staging folder goes
    assert staged(tmp_path) == [] and (tmp_path / "out" / "config.json").is_file()


def test_an_error_in_the_child_comes_back_as_an_error_of_the_set_up(tmp_path, child):
    with pytest.raises((OSError, SpecVizError)) as raised:
        child.unpack(tmp_path, "missing.gguf", tmp_path / "out", lambda: None)
    assert "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []
