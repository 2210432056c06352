"""Explain a translation: head importance, attention rollout, activation patching, attribution, and where each word
comes from (source or prefix, ALTI+)."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ..analysis.attribution import CONTRAST_KINDS, MAX_IG_STEPS, attribute
from ..analysis.contributions import contributions
from ..analysis.importance import head_importance, head_importance_estimate
from ..analysis.lens import logit_lens
from ..analysis.patching import activation_patching
from ..analysis.rollout import FUSIONS, trace_rollout
from ..bundle import Bundle, load
from ..config import InferenceOptions
from ..errors import InputError
from ..results import Translation
from ..sites import ids_site, output_site

WHAT = ("importance", "rollout", "patching", "attribution", "sources", "lens")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "what",
        choices=WHAT,
        help="importance: switch each head off alone; rollout: attention rollout; patching: copy each site from "
        "the clean run into a corrupted one (--corrupt); attribution: gradient x input and integrated gradients; "
        "sources: each output word's contributions from the source and the prefix (ALTI+); lens: each decoder "
        "layer read through the output layer (logit lens), per step",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint folder")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--top", type=int, default=10, help="importance: how many heads to list (default 10)")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="importance: estimate every head from one gradient pass instead of switching each off (long sentences)",
    )
    p.add_argument("--fusion", choices=FUSIONS, default="mean", help="rollout: how heads are fused (default mean)")
    p.add_argument("--corrupt", default=None, help="patching: the corrupted sentence (same number of pieces)")
    p.add_argument("--position", type=int, default=None, help="patching/attribution: output position (1-based)")
    p.add_argument(
        "--steps", type=int, default=32, help=f"attribution: integrated-gradients steps, 1-{MAX_IG_STEPS} (default 32)"
    )
    p.add_argument(
        "--contrast",
        default=None,
        metavar="PIECE_OR_TEXT",
        help="attribution: why the output token and not this one piece (a word or piece, e.g. 'cão')",
    )
    p.add_argument(
        "--contrast-kind",
        choices=CONTRAST_KINDS,
        default=None,
        help="attribution with --contrast: explain log p(y) - log p(c) (logit_diff, default) or p(y) - p(c)",
    )
    p.add_argument(
        "--translation",
        default=None,
        help="sources: score this translation, teacher-forced, instead of the model's own greedy translation",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("text", nargs="+", help="the sentence")


def run(args: argparse.Namespace) -> int:

    if args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    if not 1 <= args.steps <= MAX_IG_STEPS:
        raise InputError(f"--steps must be between 1 and {MAX_IG_STEPS}, got {args.steps}")
    if args.estimate and args.what != "importance":
        raise InputError(f"--estimate applies to importance, not {args.what}")
    if args.translation is not None and args.what != "sources":
        raise InputError(f"--translation applies to sources, not {args.what}")
    if args.contrast is not None and args.what != "attribution":
        raise InputError(f"--contrast applies to attribution, not {args.what}")
    if args.contrast_kind is not None and args.contrast is None:
        raise InputError("--contrast-kind needs --contrast PIECE_OR_TEXT, the alternative to the output token")
    bundle = load(args.checkpoint, device=args.device)
    if args.what == "sources":
        return _sources(args, bundle)
    if args.what == "lens":
        return _lens(args, bundle)
    out = bundle.translate(" ".join(args.text), InferenceOptions(), truncate=True)
    for notice in out.notices:  # a text cut to the model's limit, pieces it does not know: as translate says them
        print(f"note: {notice}", file=sys.stderr)
    if args.what == "importance":
        src_ids, _ = bundle.encode_source(out.source_text, truncate=True)  # as the translation was cut
        out_ids = [int(i) for i in out.trace[output_site("ids")]]
        if args.estimate:
            result = head_importance_estimate(bundle, src_ids, out_ids)
        else:
            result = head_importance(bundle, src_ids, out_ids)
        if args.json:
            print(json.dumps({"text": out.text, "output_tokens": out.output_tokens, **result.to_dict()}))
            return 0
        how = (
            "each head switched off alone"
            if result.exact
            else "each head's switch-off estimated to first order from one gradient pass"
        )
        print(
            f"{out.text}\nlog p(translation) = {result.base_logprob:.3f} over {result.n_tokens} tokens; "
            f"{how} (most relied on first):"
        )
        for e in result.ranking()[: args.top]:
            changed = f"  output changes at token {e.first_change + 1}" if e.first_change is not None else ""
            print(f"  {e.label:<16} {e.delta_logprob:+9.3f}{changed}")
        return 0
    if args.what == "patching":
        return _patching(args, bundle, out)
    if args.what == "attribution":
        return _attribution(args, bundle, out)
    r = trace_rollout(out.trace, args.fusion)
    per_output = r.per_output()
    if args.json:
        print(
            json.dumps(
                {
                    "text": out.text,
                    "src_tokens": out.src_tokens,
                    "output_tokens": out.output_tokens,
                    "fusion": r.fusion,
                    "source": r.source.round(5).tolist(),
                    "target": r.target.round(5).tolist(),
                    "notes": list(r.notes),
                }
            )
        )
        return 0
    print(out.text)
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    for t, token in enumerate(out.output_tokens):
        best = per_output[t].argsort()[::-1][:3]
        where = ", ".join(f"{out.src_tokens[j]} {per_output[t, j]:.2f}" for j in best)
        print(f"  {token:<14} source share {r.source[t].sum():.2f}; most: {where}")
    return 0


def _position(args: argparse.Namespace, n: int) -> int | None:

    if args.position is None:
        return None
    if not 1 <= args.position <= n:
        raise InputError(f"--position must be from 1 to {n} (the output has {n} tokens), got {args.position}")
    return int(args.position) - 1


def _patching(args: argparse.Namespace, bundle: Bundle, out: Translation) -> int:

    if not args.corrupt:
        raise InputError("patching needs --corrupt 'the sentence with one word replaced'")
    clean = [int(i) for i in out.trace[ids_site("src")]]
    corrupt, _ = bundle.encode_source(args.corrupt, truncate=True)
    out_ids = [int(i) for i in out.trace[output_site("ids")]]
    r = activation_patching(bundle, clean, corrupt, out_ids, position=_position(args, len(out_ids)))
    if args.json:
        print(
            json.dumps(
                {"text": out.text, "src_tokens": out.src_tokens, "output_tokens": out.output_tokens, **r.to_dict()}
            )
        )
        return 0
    token = out.output_tokens[r.position]
    print(
        f"{out.text}\noutput token {r.position + 1} {token!r}: p = {r.p_clean:.4f} clean, {r.p_corrupt:.4f} "
        "corrupted; share of it each single patch restores:"
    )
    restored = r.restored(r.encoder)
    names = ["embeddings"] + [f"encoder layer {i + 1}" for i in range(len(restored) - 1)]
    for name, row in zip(names, restored, strict=True):
        j = int(np.argmax(row))
        print(f"  {name:<16} best source position {j + 1} {out.src_tokens[j]!r}: {row[j]:+.2f}")
    heads = r.restored(r.cross_heads)
    layer, head = np.unravel_index(int(np.argmax(heads)), heads.shape)
    print(f"  best cross-attention head L{layer + 1} H{head + 1}: {heads[layer, head]:+.2f}")
    return 0


def _attribution(args: argparse.Namespace, bundle: Bundle, out: Translation) -> int:

    if args.steps < 1:
        raise InputError(f"--steps must be at least 1, got {args.steps}")
    src = [int(i) for i in out.trace[ids_site("src")]]
    out_ids = [int(i) for i in out.trace[output_site("ids")]]
    position = _position(args, len(out_ids))
    position = 0 if position is None else position
    a = attribute(
        bundle,
        src,
        out_ids,
        position,
        steps=args.steps,
        contrast=args.contrast,
        contrast_kind=args.contrast_kind or "logit_diff",
    )
    other = None if a.contrast_id is None else bundle.tokenizer.piece(a.contrast_id)
    if args.json:
        shown = {"text": out.text, "src_tokens": out.src_tokens, "output_tokens": out.output_tokens}
        print(json.dumps({**shown, **a.to_dict(), "contrast_piece": other, "explained": a.explained}))
        return 0
    token = f"output token {position + 1} {out.output_tokens[position]!r}, log p = {a.logprob:.4f}"
    if a.contrast_id is not None and a.contrast_logprob is not None:
        token += f", rather than {other!r} (log p = {a.contrast_logprob:.4f}): {a.explained} = {a.f_input:.4f}"
    print(
        f"{out.text}\n{token}; "
        f"integrated gradients ({a.ig_steps} steps, baseline: {a.baseline}; delta {a.ig_delta:+.4f}):"
    )
    for j in np.argsort(-np.abs(a.source_ig))[:5]:
        gxi = a.source_grad_x_input[j]
        print(f"  source {out.src_tokens[j]!r:<14} IG {a.source_ig[j]:+.4f}   gradient x input {gxi:+.4f}")
    return 0


def _sources(args: argparse.Namespace, bundle: Bundle) -> int:

    c = contributions(bundle, " ".join(args.text), translation=args.translation)
    if args.json:
        print(json.dumps(c.to_dict()))
        return 0
    for note in c.notes:
        print(f"note: {note}", file=sys.stderr)
    who = "the translation given (teacher-forced)" if c.forced else "the model's translation"
    print(f"source share of {who}: {c.source_share:.3f} (mean log p {c.mean_logprob:.3f}); per output token:")
    source = c.source_matrix
    for t, token in enumerate(c.target_pieces):
        best = source[t].argsort()[::-1][:3]
        where = ", ".join(f"{c.source_pieces[j]} {source[t, j]:.2f}" for j in best)
        share = c.token_source_share[t]
        print(f"  {token:<14} source {share:.2f}  prefix {1 - share:.2f}; most: {where}")
    return 0


def _lens(args: argparse.Namespace, bundle: Bundle) -> int:
    """The logit lens of the greedy translation: per step, each decoder layer's top pieces and the chosen one's p."""
    lens = logit_lens(bundle, " ".join(args.text))
    if args.json:
        print(json.dumps({"output_tokens": list(lens.chosen), **lens.to_dict()}, ensure_ascii=False))
        return 0
    print(f"logit lens over {lens.n_layers} decoder layers: each layer's top piece (p), then the chosen piece's p")
    for t, piece in enumerate(lens.chosen):
        first = int(lens.first_top[t])
        layers = "  ".join(
            f"L{layer + 1} {lens.top_pieces[layer][t][0]} {lens.top_probs[layer, t, 0]:.2f}"
            f" (chosen {lens.chosen_prob[layer, t]:.2f})"
            for layer in range(lens.n_layers)
        )
        settled = f"top from layer {first + 1}" if first >= 0 else "never the top choice"
        print(f"  {t + 1:>3} {piece:<14} {settled}: {layers}")
    return 0
