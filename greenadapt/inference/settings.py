"""``greenadapt predict``'s and ``evaluate``'s options, each declared once (:mod:`greenadapt.options`), and how a fine-tuned
model is run (:class:`LoadSettings`): the object the inference code receives from predict, evaluate, ``greenadapt.load``
and ``greenadapt.pipeline`` alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from greenadapt.data.settings import HEADERS, FieldSettings
from greenadapt.defaults import MAX_BATCH
from greenadapt.errors import UsageError
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, Settings, model_paths, option
from greenadapt.inference.onnx_runtime import QUANTIZATIONS, RUNTIMES
from greenadapt.compute.settings import POOL_MODES, DeviceSettings, PoolSettings



@dataclass(frozen=True, kw_only=True)
class RuntimeSettings(Settings):
    """What runs a fine-tuned model's forward passes: torch, or ONNX Runtime on the CPU (predict, evaluate, qa)."""

    runtime: str = option("auto", "--runtime", panel=PERFORMANCE, choices=RUNTIMES,
                          help="auto (the fastest measured for this CPU kind among runtimes that give fp32's answers, the same in any "
                               "batch: torch where the CPU has native bf16 and --precision lets torch use it, else ONNX Runtime fp32 "
                               "when installed; docs/benchmarks.md, "
                               "\"The default runtime by CPU\"), torch, or onnx: ONNX Runtime on the CPU (exported once and cached "
                               "beside the weights; needs greenadapt[onnx]).")
    quantize: str = option("none", "--quantize", panel=PERFORMANCE, choices=QUANTIZATIONS, fingerprint="when set",
                           help="With --runtime onnx: int8 weights and activations, each token's with its own scale (a sentence's "
                                "answer never depends on its batch; docs/benchmarks.md has its speed and F1).")

    def check(self) -> None:
        """Every taker of these options declares a ``--device`` too (its own words for where the model runs)."""
        from greenadapt.inference.onnx_runtime import check_runtime

        check_runtime(self.runtime, self.quantize, getattr(self, "device", "auto"))
        precision = getattr(self, "precision", "auto")
        if self.runtime == "onnx" and precision not in ("auto", "fp32"):
            import logging

            logging.getLogger(__name__).warning("--precision %s is not used with --runtime onnx: ONNX Runtime runs the fp32 graph%s",
                                                precision, " quantized to int8" if self.quantize == "int8"
                                                else " (--quantize int8 for int8)")


@dataclass(frozen=True, kw_only=True)
class ModelRunSettings(DeviceSettings, RuntimeSettings):
    """How a fine-tuned model's forward passes run, whatever is pooled (predict, evaluate, greenadapt.load)."""

    batch_size: int = option(64, "--batch-size", panel=PERFORMANCE, minimum=1, maximum=MAX_BATCH, help="Sequences per inference batch.")
    general_model: str | None = option(None, "--general-model", panel=MODEL,
                                       help="G-MAP model: its general model, if not where training found it (weights are checked).")

    def configure_process(self) -> None:
        """torch's threads are set when a torch model picks its device: a predict from a cached ONNX export never
        imports torch (ONNX Runtime's threads: :func:`~greenadapt.machine.devices.inference_threads`)."""
        from greenadapt.machine.devices import defer_cpu_threads
        from greenadapt.machine.load import choose_wait_policy

        choose_wait_policy()
        defer_cpu_threads(self.threads)


@dataclass(frozen=True, kw_only=True)
class LoadSettings(PoolSettings, ModelRunSettings):
    """A fine-tuned model run and pooled: what the inference code receives."""


def pooled_as(settings: ModelRunSettings, pool: str) -> LoadSettings:
    """``settings``' model-running options (the same declarations, as they are) pooled by ``pool``: evaluate's scorings."""
    from greenadapt.options import declared_fields

    shared = {field.name: getattr(settings, field.name) for field, _ in declared_fields(ModelRunSettings)}
    return DEFAULT_LOAD.replaced(pool=pool, **shared)  # checked when ``settings`` were made: not again


@dataclass(frozen=True, kw_only=True)
class InferenceSettings(FieldSettings, ModelRunSettings):
    """What every command that runs a fine-tuned model takes (predict, evaluate)."""

    run_options: ClassVar[tuple[str, ...]] = ()

    model: tuple[str, ...] = option(REQUIRED, "--model", "-m", public=model_paths, panel=MODEL,
                                    help="A `greenadapt finetune` run folder (or one of its seed-N folders); "
                                         "repeat it for an ensemble (the mean of the models' probabilities).")
    header: str | None = option(None, "--header", panel=INPUT_OUTPUT, choices=HEADERS,
                                help="Override TSV header detection (auto, yes, no).")

    def members(self) -> Any:
        """One folder, or the list of an ensemble's."""
        return self.model[0] if len(self.model) == 1 else list(self.model)


@dataclass(frozen=True, kw_only=True)
class TaskChoiceSettings(Settings):
    """Which task of a ``greenadapt multitask`` run to use (predict, ``greenadapt.load``)."""

    task: str | None = option(None, "--task", panel=INPUT_OUTPUT,
                              help="The task to run, when --model is a `greenadapt multitask` run folder.")


@dataclass(frozen=True, kw_only=True)
class PredictSettings(InferenceSettings, LoadSettings, TaskChoiceSettings):
    """``greenadapt predict``: entities with character offsets for raw text, labels for task files; both tokenizers."""

    command = "predict"
    positional = ("source",)
    run_options = ("force",)
    run_help = {"force": "Replace an existing --out file (never the input)."}

    source: str | None = option(None, "--source", panel=INPUT_OUTPUT, metavar="INPUT", argument=True,
                                help="Raw text (one document per line), JSON lines, a folder of .txt files, a task file, or - for stdin.")
    input_path: str | None = option(None, "--input", "-i", panel=INPUT_OUTPUT, recorded=False,
                                    help="The input, as an option (same as INPUT).")
    output: str = option("-", "--out", "--output", "-o", panel=INPUT_OUTPUT,
                         help="Where predictions go (default: stdout). "
                              "Raw input: JSON lines; a task file: itself plus a prediction column.")
    ignore_labels: bool = option(False, "--ignore-labels", panel=EVALUATION, help="Do not read or score gold labels in the input.")
    file_format: str = option("auto", "--format", panel=INPUT_OUTPUT,
                              help="auto, text (a document per line), jsonl, columns (NER word ... label) or tsv.")

    def check(self) -> None:
        super().check()
        if self.source is None and self.input_path is None:
            raise UsageError("no input: give a file or folder as INPUT, or - to read standard input",
                             hint="e.g. greenadapt predict -m MODEL notes.txt, or ... | greenadapt predict -m MODEL -")
        if self.source is not None and self.input_path is not None:
            raise UsageError("give the input once: as INPUT or as --input", hint="e.g. greenadapt predict -m MODEL notes.txt")
        if self.source is None:
            object.__setattr__(self, "source", self.input_path)
            object.__setattr__(self, "input_path", None)


@dataclass(frozen=True, kw_only=True)
class EvaluateSettings(InferenceSettings, TaskChoiceSettings):
    """``greenadapt evaluate``: score a fine-tuned run on a labelled file under each pooling mode, without training."""

    command = "evaluate"
    positional = ("data",)

    data: str = option(REQUIRED, "--data", panel=INPUT_OUTPUT, metavar="FILE", argument=True,
                       help="A labelled task file (NER columns, TSV or JSON lines), read as training read its files.")
    pool: tuple[str, ...] = option((), "--pool", panel=EVALUATION, choices=POOL_MODES,
                                   help="A pooling mode to score (mean, general, domain); repeat it (default: every mode the model has).")


DEFAULT_LOAD = LoadSettings()  # a model run as greenadapt reports it: both tokenizers mean-pooled, torch, on the best device
