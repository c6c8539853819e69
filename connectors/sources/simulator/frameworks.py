"""Normal training output: iteration, throughput and checkpoint lines per framework.

Megatron-LM (``training_log`` / ``save_checkpoint`` strings), NeMo and Lightning (tqdm
progress bars and ``ModelCheckpoint`` messages), the Hugging Face Trainer (log dicts,
``Saving model checkpoint to``) and aidot_training_telemetry's logger backend, whose
record layout is copied from the real output in the shared corpus (keys in reverse
alphabetical order at each level, nested keys joined with ``.``, error fields JSON-quoted).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from connectors.sources.simulator.fleet import Job, Rank
from connectors.sources.simulator.rand import Rng
from schemas import codec

_PARTIAL = " ▏▎▍▌▋▊▉"


def bar(frac: float) -> str:
    cells = max(0.0, min(1.0, frac)) * 10
    full = int(cells)
    part = _PARTIAL[int((cells - full) * 8)] if full < 10 else ""
    return ("█" * full + part).ljust(10)


def clock(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def loss_at(job: Job, it: int, rng: Rng) -> float:
    return 1.7 + 9.0 * math.exp(-it / 2500.0) + rng.uniform(-0.04, 0.04)


# -- iteration / progress lines -----------------------------------------------------------------


def iteration_lines(
    job: Job, t: datetime, it: int, iter_s: float, rng: Rng, loss: float | None = None
) -> list[str]:
    """What the logging rank prints every ``log_interval`` iterations."""
    loss = loss_at(job, it, rng) if loss is None else loss
    fw = job.framework
    if fw == "megatron":
        consumed = it * job.global_batch
        tflops = 3.2e11 * job.global_batch * job.seq_len / max(iter_s, 1e-3) / job.world / 1e12 / 1000
        loss_txt = "" if math.isnan(loss) else f" lm loss: {loss:.6E} |"
        nan_iters = 1 if math.isnan(loss) else 0
        return [
            f" [{t:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{job.train_iters:8d} | consumed samples: "
            f"{consumed:12d} | "
            f"elapsed time per iteration (ms): {iter_s * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): "
            f"{tflops:.1f} | learning rate: {1.5e-4 * min(1.0, it / 2000 + 0.01):.6E} | global batch size: "
            f"{job.global_batch:5d} |{loss_txt} loss scale: 1.0 | grad norm: {rng.uniform(0.3, 2.5):.3f} | "
            f"number of skipped iterations: {0:3d} | number of nan iterations: {nan_iters:3d} |"
        ]
    total = job.train_iters // 100
    n = it % total if total else it
    frac = n / total if total else 0.0
    elapsed = n * job.iter_s
    if fw == "nemo":
        return [
            f"Epoch 0: : {int(frac * 100):3d}%|{bar(frac)}| {n}/{total} [{clock(elapsed)}<"
            f"{clock((total - n) * iter_s)}, reduced_train_loss={loss:.3f}, global_step={it - 1}.0, "
            f"consumed_samples={float(it * job.global_batch)}, train_step_timing in s={iter_s:.3f}]"
        ]
    if fw == "lightning":
        return [
            f"Epoch {it // total if total else 0}: {int(frac * 100):3d}%|{bar(frac)}| {n}/{total} "
            f"[{clock(elapsed)}<{clock((total - n) * iter_s)}, {1 / iter_s:5.2f}it/s, "
            f"v_num={job.job_id[-2:]}, "
            f"train_loss={loss:.3f}]"
        ]
    if fw == "hf":
        return [
            f"{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.3, 2.5):.4f}, 'learning_rate': "
            f"{4.9e-05 * (1 - it / job.train_iters):.4e}, 'epoch': {it / total:.2f}}}",
            f"{int(frac * 100):3d}%|{bar(frac)}| {n}/{total} "
            f"[{clock(elapsed)}<{clock((total - n) * iter_s)}, "
            f"{1 / iter_s:5.2f}it/s]",
        ]
    return []


def checkpoint_save_lines(job: Job, t: datetime, it: int, rng: Rng) -> tuple[list[str], list[str]]:
    """(lines when a save starts, lines when it completed)."""
    fw = job.framework
    if fw == "megatron":
        tp, pp = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 4))
        fmt = rng.choice(("", " in torch_dist format"))
        return (
            [f"saving checkpoint at iteration {it:7d} to {job.ckpt_dir}{fmt}"],
            [
                f"  successfully saved checkpoint from iteration {it:7d} to {job.ckpt_dir} [ t 1/{tp}, p "
                f"1/{pp} ]"
            ],
        )
    if fw in ("nemo", "lightning"):
        monitor = "reduced_train_loss" if fw == "nemo" else "val_loss"
        value = loss_at(job, it, rng)
        name = (
            f"megatron_gpt--{monitor}={value:.4f}-epoch=0-step={it}.ckpt"
            if fw == "nemo"
            else f"epoch={it // max(1, job.train_iters // 100)}-step={it}.ckpt"
        )
        return (
            [],
            [
                f"Epoch 0, global step {it}: {monitor!r} reached {value:.5f} (best {value:.5f}), saving "
                "model to "
                f"'{job.ckpt_dir}/checkpoints/{name}' as top 3"
            ],
        )
    if fw == "hf":
        return ([f"Saving model checkpoint to {job.ckpt_dir}/checkpoint-{it}"], [])
    return ([], [])


def checkpoint_load_lines(job: Job, t: datetime, it: int) -> list[str]:
    fw = job.framework
    if fw == "megatron":
        if it == 0:
            return [
                f"WARNING: could not find the metadata file {job.ckpt_dir}/latest_checkpointed_iteration.txt",
                "    will not load any checkpoints and will start from random",
            ]
        return [
            f" loading checkpoint from {job.ckpt_dir} at iteration {it}",
            f"  successfully loaded checkpoint from {job.ckpt_dir} [ t 1/1, p 1/1 ] at iteration {it}",
        ]
    if fw == "nemo":
        return [
            f"[NeMo I {t:%Y-%m-%d %H:%M:%S} exp_manager:396] Experiments will be logged at {job.ckpt_dir}"
        ] + (
            [
                f"[NeMo I {t:%Y-%m-%d %H:%M:%S} exp_manager:716] Resuming training from checkpoint: "
                f"{job.ckpt_dir}/checkpoints/megatron_gpt--step={it}-last.ckpt"
            ]
            if it
            else []
        )
    if fw == "lightning" and it:
        return [f"Restoring states from the checkpoint path at {job.ckpt_dir}/checkpoints/last.ckpt"]
    if fw == "hf" and it:
        return [
            "Continuing training from checkpoint, will skip to saved global_step",
            f"  Continuing training from global step {it}",
        ]
    return []


def finished_lines(job: Job, it: int) -> list[str]:
    if job.framework in ("nemo", "lightning"):
        return [f"`Trainer.fit` stopped: `max_steps={it}` reached."]
    if job.framework == "hf":
        return [
            "",
            "",
            "Training completed. Do not forget to share your model on huggingface.co/models =)",
            "",
        ]
    if job.framework == "megatron":
        return [f"[after training is done] datetime: {it}"]
    return []


# -- aidot_training_telemetry --------------------------------------------------------------------


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    """Nested keys joined with ``.``, reverse alphabetical at each level; error fields JSON-quoted."""
    if isinstance(value, dict):
        for k in sorted(value, reverse=True):
            _flatten(f"{prefix}.{k}" if prefix else k, value[k], out)
        return
    if isinstance(value, bool):
        text = "True" if value else "False"
    elif isinstance(value, str) and prefix.rsplit(".", 1)[-1] in _ERROR_FIELDS:
        text = codec.dumps(value).decode()
    else:
        text = str(value)
    out.append((prefix, text))


class Aidot:
    """One rank's telemetry recorder: ``count`` per process, logger-backend lines (``logger-*.log`` form)."""

    def __init__(self, job: Job, rank: Rank, rng: Rng) -> None:
        self.job = job
        self.rank = rank
        self.rng = rng
        self.count = 0
        self.main_id = rng.uuid()
        self.loop_id = rng.uuid()

    def startup(self, t: datetime) -> list[str]:
        asct = self.asctime(t)
        r = self.rank.rank
        return [
            f"{asct} - training_telemetry - INFO - Initializing logger backend, rank_aware=True, "
            f"logger_name=training_telemetry_rank{r}, errors_only=False",
            f"{asct} - training_telemetry - INFO - Initializing file backend, rank={r}, rank_aware=True, "
            f"output_file_path=telemetry/events_rank_{r}_{t:%Y%m%d_%H%M%S}.json",
            f"{asct} - training_telemetry - INFO - Initializing recorder with 2 backends, "
            "training-telemetry-version=1.1.2",
        ]

    @staticmethod
    def asctime(t: datetime) -> str:
        return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"

    def line(self, t: datetime, record: dict[str, Any]) -> str:
        self.count += 1
        rec = {**record, "pid": self.rank.pid, "count": self.count}
        flat: list[tuple[str, str]] = []
        _flatten("", rec, flat)
        body = " | ".join(f"{k}={v}" for k, v in flat)
        return f"{self.asctime(t)} - training_telemetry_rank{self.rank.rank} - INFO - [{body}]"

    def main_start(self, t: datetime, node: str) -> str:
        return self.line(
            t,
            {
                "type": "start",
                "id": self.main_id,
                "name": "main_function",
                "event": {
                    "name": "span_start",
                    "timestamp": _iso(t),
                    "metrics": {
                        "rank": self.rank.rank,
                        "world_size": self.job.world,
                        "node_name": node,
                        "timezone": "Etc/UTC",
                    },
                },
            },
        )

    def iterations(self, t: datetime, it: int, interval: int, iter_s: float, loss: float) -> str:
        tokens = self.job.global_batch * self.job.seq_len / max(iter_s, 1e-3) / self.job.world
        return self.line(
            t,
            {
                "type": "event",
                "id": self.loop_id,
                "name": "training_loop",
                "event": {
                    "name": "training_iterations",
                    "timestamp": _iso(t),
                    "metrics": {
                        "current_iteration": it,
                        "num_iterations": interval,
                        "interval": interval,
                        "average_iteration_time": iter_s,
                        "average_forward_time": iter_s * 0.32,
                        "average_backward_time": iter_s * 0.57,
                        "average_dataloader_time": iter_s * 0.04,
                        "average_optimizer_update_time": iter_s * 0.06,
                        "tflops": round(tokens * 7.8e-3, 6),
                        "tokens_per_second": tokens,
                        "loss": round(loss, 4),
                        "batch_size": self.job.global_batch // self.job.world or 1,
                    },
                },
            },
        )

    def device(self, t: datetime, it: int, temp: float, util: float, clock_mhz: int) -> str:
        return self.line(
            t,
            {
                "type": "event",
                "id": self.loop_id,
                "name": "training_loop",
                "event": {
                    "name": "device_properties",
                    "timestamp": _iso(t),
                    "metrics": {
                        "current_iteration": it,
                        "gpu_utilization": util,
                        "memory_usage": round(self.rng.uniform(38, 60), 1),
                        "power_draw": self.rng.randint(600_000, 690_000),
                        "temperature": temp,
                        "clock_rate": clock_mhz,
                        "nvlink_metrics": {
                            "tx_data_payload": round(self.rng.uniform(1.9e7, 2.1e7), 1),
                            "rx_data_payload": round(self.rng.uniform(1.9e7, 2.1e7), 1),
                            "crc_errors": 0,
                            "replay_errors": 0,
                            "recovery_errors": 0,
                        },
                    },
                },
            },
        )

    def checkpoint(self, t: datetime, it: int, elapsed: float, since: int) -> str:
        return self.line(
            t,
            {
                "type": "complete",
                "id": self.rng.uuid(),
                "name": "checkpoint_save_sync",
                "elapsed": elapsed,
                "start_event": {"name": "span_start", "timestamp": _iso(t)},
                "stop_event": {
                    "name": "span_stop",
                    "timestamp": _iso(t),
                    "metrics": {
                        "checkpoint_type": "CheckPointType.GLOBAL",
                        "current_iteration": it,
                        "num_iterations": since,
                        "interval": since,
                        "checkpoint_size": 4_550_000_000,
                        "checkpoint_directory": f"{self.job.ckpt_dir}/iter_{it:07d}",
                    },
                },
            },
        )

    def error(self, t: datetime, span: str, exc_type: str, message: str, tb: str) -> str:
        return self.line(
            t,
            {
                "type": "error",
                "id": self.loop_id if span == "training_loop" else self.rng.uuid(),
                "name": span,
                "event": {
                    "name": "error",
                    "timestamp": _iso(t),
                    "error_message": f"Error in SpanName.{span.upper()}:",
                    "exception_type": exc_type,
                    "exception_message": message,
                    "exception_traceback": tb,
                },
            },
        )


_ERROR_FIELDS = {"error_message", "exception_type", "exception_message", "exception_traceback"}


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")
