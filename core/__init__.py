"""Transformer Attention Lab — the engine.

    import core
    bundle = core.load("checkpoints/distilled-en-pt")
    out = bundle.translate("Is there any tea left?")
    out.trace["decoder.0.cross.weights"]  # (heads, n_query, n_key), the same as out.trace.attention("cross", 0)
    out.trace.keys()                      # every recorded site
    core.Trace.load("trace.npz")          # a saved trace, without the model

Per-call recording and interventions: ``core.Recorder(model, interventions=[core.ScaleHeads(...), core.Patch(...)])``
(also ``core.ScaleValues``).
"""

from .bundle import Bundle, load
from .config import InferenceOptions, ModelConfig, Record
from .errors import CheckpointError, InputError, LabError
from .fast.weights import FastWeights
from .inputs import clean_text
from .recording.call import Call
from .recording.interventions import Intervention, Patch, ScaleHeads, ScaleValues
from .recording.recorder import Recorder
from .recording.trace import ModelShape, Trace
from .results import Step, Translation
from .sites import ATTENTION_KINDS, AttentionKind, attention_site
from .storage.checkpoint import CheckpointMeta, default_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .text.tokenizer import Tokenizer
from .transformer.model import Transformer

__all__ = [
    "Call",
    "ATTENTION_KINDS",
    "AttentionKind",
    "Bundle",
    "CheckpointError",
    "CheckpointMeta",
    "FastWeights",
    "InferenceOptions",
    "InputError",
    "Intervention",
    "LabError",
    "ModelConfig",
    "ModelShape",
    "Patch",
    "Record",
    "Recorder",
    "ScaleHeads",
    "ScaleValues",
    "Step",
    "Tokenizer",
    "Trace",
    "Transformer",
    "Translation",
    "attention_site",
    "clean_text",
    "default_checkpoint",
    "list_checkpoints",
    "load",
    "load_checkpoint",
    "save_checkpoint",
]
