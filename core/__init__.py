"""Transformer Attention Lab — the engine.

    import core
    bundle = core.load("checkpoints/ding-en-de")
    out = bundle.translate("Is there any tea left?")
    out.trace.attention("cross", 0)   # (heads, n_query, n_key)
"""
from .bundle import Bundle, Step, Translation, clean_text, load
from .checkpoint import CheckpointMeta, default_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .config import ATTENTION_KINDS, InferenceOptions, ModelConfig
from .errors import CheckpointError, InputError, LabError
from .model import Transformer
from .tokenizer import Tokenizer
from .trace import Recorder, Trace

__all__ = [
    "ATTENTION_KINDS", "Bundle", "CheckpointError", "CheckpointMeta", "InferenceOptions", "InputError", "LabError",
    "ModelConfig", "Recorder", "Step", "Tokenizer", "Trace", "Transformer", "Translation", "clean_text",
    "default_checkpoint", "list_checkpoints", "load", "load_checkpoint", "save_checkpoint",
]
