"""An error the job went on training after is not the failure that ended it (a finished log only).

Progress printed after an error in the same file (Megatron's iteration lines, Hugging Face
Trainer's loss dicts) means the job lived through it; the specific error after that progress is the
root, and the survived one stays in the evidence, saying so. Hardware faults are never set aside."""

from __future__ import annotations

from pathlib import Path

from schemas.signals import Role
from streams.diagnose.driver import Diagnoser, summary
from tests.diagnose.logs import NOW, diagnosed, outcome

ENOSPC = "OSError: [Errno 28] No space left on device: '/tmp/torchinductor_user/abc'"
OOM = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."
ECC = "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def _iteration(i: int) -> str:
    return (
        f" iteration      {i}/    1000 | consumed samples:        25600 | elapsed time per iteration (ms): "
        "9969.4 | learning rate: 4.500000E-06 | global batch size:   512 | lm loss: 4.791878E-03 |"
    )


def _hf(step: float) -> str:
    return f"{{'loss': 2.3112, 'grad_norm': 1.25, 'learning_rate': 2e-05, 'epoch': {step}}}"


def test_an_error_followed_by_training_progress_gives_way_to_the_error_that_ended_the_job(tmp_path):
    s = summary(diagnosed(tmp_path, [ENOSPC, _iteration(100), _iteration(200), OOM]))
    assert outcome(s) == ("cuda.out_of_memory", "application", False, [])
    survived = [e for e in s["evidence"] if isinstance(e, dict) and e["rule"] == "infra.no_space_left"]
    assert len(survived) == 1


def test_hugging_face_trainer_loss_lines_count_as_progress(tmp_path):
    lines = [ENOSPC, _hf(0.01), _hf(0.02), OOM]
    assert outcome(summary(diagnosed(tmp_path, lines)))[0] == "cuda.out_of_memory"


def test_one_progress_line_after_an_error_is_not_enough_to_set_it_aside(tmp_path):
    """After a rank dies the others may still log the step that was in flight."""
    assert outcome(summary(diagnosed(tmp_path, [ENOSPC, _iteration(100), OOM])))[0] == "infra.no_space_left"


def test_a_hardware_fault_the_job_outlived_stays_the_root(tmp_path):
    rule, category, _, _ = outcome(summary(diagnosed(tmp_path, [ECC, _iteration(100), _iteration(200), OOM])))
    assert (rule, category) == ("cuda.uncorrectable_ecc", "hardware_gpu")


def test_progress_in_another_file_says_nothing_about_this_files_error(tmp_path: Path):
    """Rank 1's file shows its error and nothing after; rank 0's file trained on and then failed."""
    rank1, rank0 = tmp_path / "rank1.log", tmp_path / "rank0.log"
    rank1.write_text(ENOSPC + "\n")
    rank0.write_text("\n".join([_iteration(100), _iteration(200), OOM]) + "\n")
    d = Diagnoser().run([str(rank1), str(rank0)], NOW)
    [enospc] = [x for x in d.signals if x.rule == "infra.no_space_left"]
    assert enospc.role == Role.ROOT_CANDIDATE and "survived" not in enospc.attrs


def test_the_same_error_again_after_progress_is_no_survival(tmp_path):
    """A launcher restarted the job and it failed the same way: the restart loop's reading."""
    d = diagnosed(tmp_path, [ENOSPC, _iteration(100), _iteration(200), ENOSPC])
    assert all(x.role == Role.ROOT_CANDIDATE for x in d.signals if x.rule == "infra.no_space_left")
