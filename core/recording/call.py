"""``Call``: what one call of the model carries down, in one frozen object built once per call.

A call (``Bundle.translate``, a decoding loop, an analysis pass) builds ONE ``Call`` and passes it unchanged
through decoding -> ``Transformer.encode`` / ``decode`` -> the layers -> attention: the options, the recorder, the
fast path's weights, the shortlist's ids, and the decoding settings. Nothing of it is stored on the model, and a
decoding step builds nothing new from it (x-transformers passes one cache object down the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor

from ..config import InferenceOptions
from .recorder import HasConfig, Recorder

if TYPE_CHECKING:
    from ..decoding.sampling import Sampling
    from ..fast.weights import FastWeights
    from ..transformer.attention import LinearFn


@dataclass(frozen=True, eq=False)  # tensors and a recorder inside: compared by identity
class Call:
    """One call's context.

    options: the per-call switches (masks, positional encoding, heads off, shortlist).
    recorder: records the call and applies its interventions; None = nothing recorded (the fast path), unless the
        options switch heads off (``begin`` then makes a non-recording one: ablation is an intervention).
    fast: the fast path's weights (``core.fast.weights``); None = plain ``F.linear`` everywhere (the reference path).
    vocab: (S,) sorted ids, the only ones scored (a lexical shortlist, ``core.decoding.shortlist``); None = every id.
    max_len, top_k, prefix, beam_size, alpha, use_cache, sampling: decoding's settings (``core.decoding.search``):
        at most ``max_len`` output ids (None: ``default_max_len`` of the source), the ``top_k`` alternatives recorded
        per step, output ids forced at the first steps, the beam's width and length penalty (None: the model's own,
        ``ModelConfig.length_penalty``), the KV cache (None: on with the causal mask; off, each step recomputes the
        prefix), and how greedy decoding's pieces are drawn instead of taken (``core.decoding.sampling``; None: the
        top choice).
    """

    options: InferenceOptions = field(default_factory=InferenceOptions)
    recorder: Recorder | None = None
    fast: FastWeights | None = None
    vocab: Tensor | None = None
    max_len: int | None = None
    top_k: int = 10
    prefix: tuple[int, ...] = ()
    beam_size: int = 1
    alpha: float | None = None
    use_cache: bool | None = None
    sampling: Sampling | None = None

    @property
    def linear(self) -> LinearFn:
        """``(x, weight, bias) -> x W^T + b`` for this call: ``F.linear``, or the fast path's."""
        return F.linear if self.fast is None else self.fast.linear

    @property
    def cache(self) -> bool:
        """Whether decoding keeps a KV cache (``use_cache``, by default on with the causal mask)."""
        return self.options.causal_mask if self.use_cache is None else self.use_cache

    def begin(self, model: HasConfig) -> Call:
        """This call ready to run on ``model``: its recorder told the options, or a non-recording recorder when the
        options switch heads off. Cheap when already begun (the model calls it at every encode / decode)."""
        recorder = self.recorder
        if recorder is None:
            if not self.options.ablate:
                return self
            recorder = Recorder(model, record=False)
        recorder.begin(self.options)
        return self if recorder is self.recorder else replace(self, recorder=recorder)

    def with_recorder(self, recorder: Recorder | None) -> Call:
        """The same call with another recorder (beam search records each step's attention on its own)."""
        return replace(self, recorder=recorder)


DEFAULT_CALL = Call()
