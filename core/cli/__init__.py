"""Command line: ``python -m core {translate,info,train,eval,import-bergamot,import-hf,export-hf,export-ct2} ...``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from .errors import LabError

# Sub-commands that live in their own modules register here: name -> module with add_arguments(p) and run(args).
EXTERNAL = {
    "train": "core.training.recipes",
    "eval": "core.training.evaluate",
    "import-bergamot": "core.importers.bergamot",
    "import-hf": "core.importers.hf_marian",
    "export-hf": "core.exporters.hf_marian",
    "export-ct2": "core.exporters.ct2",
    "publish": "core.training.publish",
    "distill": "core.distill.student",
    "distill-long": "core.distill.long",
    "explain": "core.analysis.commands",
    "heads": "core.analysis.head_commands",
}


def _translate(args: argparse.Namespace) -> int:
    from .bundle import load
    from .config import InferenceOptions
    from .sites import attention_site

    bundle = load(args.checkpoint, device=args.device)
    options = InferenceOptions(
        positional_encoding=not args.no_pe,
        causal_mask=not args.no_causal_mask,
        padding_mask=not args.no_padding_mask,
        shortlist=args.shortlist,
    )
    out = bundle.translate(" ".join(args.text), options, beam_size=args.beam, truncate=True)
    if args.json:
        data = out.to_dict()
        data["attention"] = {
            f"{attention_site(kind, layer)}.weights": out.trace.attention(kind, layer).round(5).tolist()
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


def _info(args: argparse.Namespace) -> int:
    from .bundle import load

    bundle = load(args.checkpoint, device="cpu")
    cfg = bundle.config
    src, tgt = bundle.languages
    print(f"name:        {bundle.name}")
    print(f"languages:   {src} -> {tgt}")
    print(f"parameters:  {bundle.model.n_parameters():,}")
    print(f"vocabulary:  {bundle.tokenizer.vocab_size} pieces")
    if bundle.shortlist is not None:
        sl = bundle.shortlist
        print(f"shortlist:   lexical, {sl.frequent} most frequent + {sl.best} best per source piece (--shortlist)")
    for key, value in cfg.to_dict().items():
        print(f"  {key}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Transformer Attention Lab engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("translate", help="translate a sentence (optionally print every attention array as JSON)")
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
    p.add_argument("text", nargs="+", help="the sentence")
    p.set_defaults(func=_translate)
    p = sub.add_parser("info", help="describe a checkpoint")
    p.add_argument("checkpoint")
    p.set_defaults(func=_info)
    for name, module_name in EXTERNAL.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not exc.name or not module_name.startswith(exc.name):
                raise
            continue
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly, as other tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # training and distillation keep resumable state: the same command goes on
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 — the last resort: one line, never a traceback (LAB_DEBUG=1 shows it)
        import os

        if os.environ.get("LAB_DEBUG"):
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, OSError | UnicodeError) else 1


def describe(exc: Exception) -> str:
    """One line for a failure the commands did not turn into a ``LabError`` themselves: a file that cannot be
    read or written says which and why; anything else says what it was and that it was not expected."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}); check the files the command reads"
    if isinstance(exc, OSError):
        return str(exc)
    return f"{type(exc).__name__}: {exc} (not expected: please report it; LAB_DEBUG=1 shows where it happened)"
