"""translate a sentence (optionally print every attention array as JSON)"""

from __future__ import annotations

import argparse
import json
import sys

from ..bundle import load
from ..config import InferenceOptions
from ..decoding.sampling import Sampling
from ..sites import attention_array


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="checkpoint folder")
    p.add_argument("--json", action="store_true", help="print text, tokens and every attention array as JSON")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--no-pe", action="store_true", help="switch positional encoding off")
    p.add_argument("--no-causal-mask", action="store_true", help="switch the decoder's causal mask off")
    p.add_argument("--no-padding-mask", action="store_true", help="switch padding masks off")
    p.add_argument(
        "--shortlist",
        action="store_true",
        help="score only the model's lexical shortlist at each step, as its production engine does "
        "(imported Bergamot models)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="draw each piece instead of taking the top one, from the distribution at this temperature "
        "(0 = the top choice; with --top-k, --top-p, --seed)",
    )
    p.add_argument("--top-k", type=int, default=None, help="sampling: draw among the k most probable pieces only")
    p.add_argument("--top-p", type=float, default=None, help="sampling: draw among the smallest set reaching p")
    p.add_argument(
        "--seed", type=int, default=None, help="sampling: the random seed (default 0): same seed, same output"
    )
    p.add_argument("text", nargs="+", help="the sentence")


def run(args: argparse.Namespace) -> int:
    bundle = load(args.checkpoint, device=args.device)
    options = InferenceOptions(
        positional_encoding=not args.no_pe,
        causal_mask=not args.no_causal_mask,
        padding_mask=not args.no_padding_mask,
        shortlist=args.shortlist,
    )
    drawn = (args.temperature, args.top_k, args.top_p, args.seed)
    sampling = None
    if any(value is not None for value in drawn):
        t, k, p, seed = drawn
        sampling = Sampling(temperature=1.0 if t is None else t, top_k=k, top_p=p, seed=0 if seed is None else seed)
    out = bundle.translate(" ".join(args.text), options, beam_size=args.beam, truncate=True, sampling=sampling)
    if args.json:
        data = out.to_dict()
        data["attention"] = {
            attention_array(kind, layer, "weights"): out.trace.attention(kind, layer).round(5).tolist()
            for kind in out.trace.kinds
            for layer in range(out.trace.n_layers[kind])
        }
        # ASCII escapes when stdout cannot encode the text (e.g. PYTHONIOENCODING=ascii): still valid JSON
        text = json.dumps(data, ensure_ascii=False)
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        try:
            text.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            text = json.dumps(data)
        print(text)
    else:
        for notice in out.notices:
            print(f"note: {notice}", file=sys.stderr)
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        print(out.text.encode(encoding, errors="backslashreplace").decode(encoding))
    return 0
