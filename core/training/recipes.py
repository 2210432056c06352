"""Train a translation Transformer (English -> German on the Ding corpus) or a synthetic copy/reverse task.

The recipes and the command line of ``python -m core train``; the loop itself is ``core.training.train``.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ..config import InferenceOptions, ModelConfig
from ..decoding.search import greedy
from ..errors import InputError
from ..recording.call import Call
from ..storage.checkpoint import CheckpointMeta, save_checkpoint
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .batching import Batch, collate, token_batches
from .corpus import prepare
from .evaluate import score, translate_many
from .train import (
    TrainConfig,
    Trainer,
    fit,
    init_distributed,
    is_main,
    plot_curves,
    seed_everything,
)

# --vocab-size: SentencePiece needs its 4 special pieces (pad, bos, eos, unk) and one piece per character of the
# text (training the tokenizer says how many when too few); past its 200,000 seed pieces it gives what the text
# supports, and past 2**31 it cannot read the number
MIN_VOCAB, MAX_VOCAB = 5, 1_000_000

# Sentences we wrote ourselves, to see whether outputs depend on the input (not from the corpus).
PROBE_SENTENCES = [
    "Where is the nearest train station?",
    "I would like a cup of tea.",
    "My sister lives in Berlin.",
    "The weather is very cold today.",
    "Can you help me, please?",
    "We are going to the cinema tonight.",
    "This book is very interesting.",
    "He forgot his keys at home.",
    "How much does this cost?",
    "The children are playing in the garden.",
]


@dataclass(frozen=True)
class DingRecipe:
    """The English -> German Ding recipe's data and model shape (``python -m core train``'s options)."""

    out: Path  # the checkpoint folder the best model is named after
    data_dir: Path = Path("data/ding-split")
    cache_dir: Path = Path("data/ding")
    vocab_size: int = 8000  # SentencePiece pieces, MIN_VOCAB to MAX_VOCAB
    d_model: int = 256
    heads: int = 8
    layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    norm: Literal["pre", "post"] = "pre"
    sentence_weight: int = 4  # how often each training sentence appears per epoch
    phrases: bool = True  # also phrase pairs (else full sentences only)
    words: bool = False  # also single-word pairs
    max_pieces: int = 64  # drop pairs longer than this many pieces
    dev_bleu_sentences: int = 300

    def __post_init__(self) -> None:
        if not MIN_VOCAB <= self.vocab_size <= MAX_VOCAB:
            raise InputError(
                f"--vocab-size must be from {MIN_VOCAB} (the 4 special pieces and a character) to {MAX_VOCAB:,}, "
                f"got {self.vocab_size}"
            )


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _shard(batches: list[list[int]], rank: int, world: int) -> list[list[int]]:
    usable = len(batches) - len(batches) % world  # every rank runs the same number of steps
    return batches[rank:usable:world]


def checksum(model: Transformer) -> str:
    h = hashlib.sha256()
    for _, v in sorted(model.state_dict().items()):
        h.update(v.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- synthetic
def run_synthetic(
    task: str,
    run_dir: Path,
    config: TrainConfig | None = None,
    *,
    vocab: int = 16,
    lengths: tuple[int, int] = (3, 7),
    layers: int = 2,
    seed: int = 0,
    n_train: int = 4000,
    progress: bool = False,
) -> dict:
    """Teach a tiny model (``layers`` encoder and decoder layers) to copy or reverse random token sequences (ids 4
    to ``vocab - 1``, ``lengths`` the shortest and longest); returns exact-match accuracy on 200 held-out ones,
    none of them a training sequence."""
    config = config or TrainConfig()
    if config.max_steps == 0:
        config = TrainConfig(**{**config.__dict__, "max_steps": 600})
    config = TrainConfig(
        **{
            **config.__dict__,
            "warmup": min(config.warmup, 100),
            "lr_factor": min(config.lr_factor, 0.6),
            "eval_every": 0,
            "label_smoothing": 0.0,
            "max_tokens": min(config.max_tokens, 800),
        }
    )
    rank, world = init_distributed()
    seed_everything(seed)
    rng = random.Random(seed)

    shortest, longest = lengths
    if not (vocab > 4 and 1 <= shortest <= longest and layers >= 1):
        raise InputError(
            f"a synthetic task needs vocab > 4, 1 <= shortest <= longest and layers >= 1, got {vocab}, {lengths}, "
            f"{layers}"
        )

    def sample() -> list[int]:
        return [rng.randrange(4, vocab) for _ in range(rng.randint(shortest, longest))]

    def target(seq: list[int]) -> list[int]:
        return list(seq) if task == "copy" else seq[::-1]

    train = [sample() for _ in range(n_train)]
    seen = {tuple(s) for s in train}
    held_out: list[list[int]] = []
    for _ in range(100_000):  # bounded: a tiny task may have fewer than 200 unseen sequences
        if len(held_out) == 200:
            break
        candidate = sample()
        if tuple(candidate) not in seen:
            held_out.append(candidate)
            seen.add(tuple(candidate))
    if not held_out:
        raise InputError(f"the training set holds every sequence of this task (vocab {vocab}, lengths {lengths})")
    mcfg = ModelConfig(
        vocab,
        vocab,
        d_model=32,
        n_heads=4,
        n_encoder_layers=layers,
        n_decoder_layers=layers,
        d_ff=64,
        dropout=0.0,
        norm="pre",
    )
    trainer = Trainer(Transformer(mcfg), config, run_dir, _device())
    lens = [len(s) for s in train]

    def make_epoch(epoch: int) -> list[Batch]:
        groups = _shard(token_batches(lens, lens, config.max_tokens, seed, epoch), rank, world)
        return [collate([train[i] for i in g], [target(train[i]) for i in g], 0, 1, 2) for g in groups]

    run_dir.mkdir(parents=True, exist_ok=True)
    trainer.load_state()
    fit(trainer, make_epoch, log_path=run_dir / "log.jsonl", progress=progress)
    model = trainer.model.eval()
    width = longest + 1  # the longest sequence and its eos
    src = torch.tensor([s + [2] + [0] * (width - 1 - len(s)) for s in held_out])  # (N, width)
    keep = torch.tensor([[True] * (len(s) + 1) + [False] * (width - 1 - len(s)) for s in held_out])  # (N, width)
    out = greedy(model, src, keep, call=Call(options=InferenceOptions(), max_len=width + 1, top_k=1))
    correct = sum(out.tokens[i, 1 : 1 + out.lengths[i]].tolist() == target(s) + [2] for i, s in enumerate(held_out))
    result = {
        "task": task,
        "steps": trainer.step,
        "accuracy": correct / len(held_out),
        "rank": rank,
        "world": world,
        "checksum": checksum(model),
    }
    (run_dir / f"result_rank{rank}.json").write_text(json.dumps(result))
    return result


# ----------------------------------------------------------------------------- Ding English -> German
def _encode_pairs(tok: Tokenizer, pairs: list, max_pieces: int) -> tuple[list[list[int]], list[list[int]]]:
    src = tok.encode_batch([p.en for p in pairs])
    tgt = tok.encode_batch([p.de for p in pairs])
    keep = [i for i in range(len(pairs)) if 0 < len(src[i]) <= max_pieces and 0 < len(tgt[i]) <= max_pieces]
    return [src[i] for i in keep], [tgt[i] for i in keep]


def run_ding(recipe: DingRecipe, config: TrainConfig, run_dir: Path) -> None:
    """Train (or resume) the Ding recipe in ``run_dir``; the best model is saved as ``run_dir/best``."""
    rank, world = init_distributed()
    seed_everything(config.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    split = prepare(recipe.data_dir, recipe.cache_dir)
    spm_path = run_dir / "spm.model"
    if is_main() and not spm_path.is_file():
        text = [p.en for p in split.train if p.kind == "sentence"] * 3 + [
            p.de for p in split.train if p.kind == "sentence"
        ] * 3
        text += [p.en for p in split.train if p.kind != "sentence"] + [
            p.de for p in split.train if p.kind != "sentence"
        ]
        random.Random(0).shuffle(text)
        try:
            Tokenizer.train(text[:1_500_000], run_dir / "spm", vocab_size=recipe.vocab_size)
        except InputError as exc:
            raise InputError(f"--vocab-size {recipe.vocab_size}: {exc}") from None
    if world > 1:
        torch.distributed.barrier()
    tok = Tokenizer(spm_path)
    ids = tok.special_ids()
    mcfg = ModelConfig(
        tok.vocab_size,
        tok.vocab_size,
        d_model=recipe.d_model,
        n_heads=recipe.heads,
        n_encoder_layers=recipe.layers,
        n_decoder_layers=recipe.layers,
        d_ff=recipe.d_ff,
        dropout=recipe.dropout,
        norm=recipe.norm,
        pad_id=ids["pad_id"],
        bos_id=ids["bos_id"],
        eos_id=ids["eos_id"],
        unk_id=ids["unk_id"],
    )
    sentences = [p for p in split.train if p.kind == "sentence"]
    phrases = [p for p in split.train if p.kind == "phrase"] if recipe.phrases else []
    words = [p for p in split.train if p.kind == "word"] if recipe.words else []
    s_src, s_tgt = _encode_pairs(tok, sentences, recipe.max_pieces)
    p_src, p_tgt = _encode_pairs(tok, phrases + words, recipe.max_pieces)
    per_epoch_phrases = min(len(p_src), 25 * len(s_src) // 5)  # phrases sampled afresh each epoch
    dev = [p for p in split.dev]
    d_src, d_tgt = _encode_pairs(tok, dev, 10_000)
    dev_batches = [
        collate([d_src[i] for i in g], [d_tgt[i] for i in g], mcfg.pad_id, mcfg.bos_id, mcfg.eos_id)
        for g in token_batches([len(s) for s in d_src], [len(t) for t in d_tgt], 3000, 0, 0, shuffle=False)
    ]
    trainer = Trainer(Transformer(mcfg), config, run_dir, _device())
    resumed = trainer.load_state()
    if is_main():
        print(
            f"model: {trainer.model.n_parameters():,} parameters; {len(s_src):,} sentences x{recipe.sentence_weight} + "
            f"{per_epoch_phrases:,} of {len(p_src):,} phrase pairs per epoch; "
            f"{'resumed at step ' + str(trainer.step) if resumed else 'fresh start'}"
        )

    def make_epoch(epoch: int) -> list[Batch]:
        rng = random.Random(config.seed + epoch)
        picked = rng.sample(range(len(p_src)), per_epoch_phrases) if per_epoch_phrases else []
        src = s_src * recipe.sentence_weight + [p_src[i] for i in picked]
        tgt = s_tgt * recipe.sentence_weight + [p_tgt[i] for i in picked]
        groups = _shard(
            token_batches([len(s) for s in src], [len(t) for t in tgt], config.max_tokens, config.seed, epoch),
            rank,
            world,
        )
        return [
            collate([src[i] for i in g], [tgt[i] for i in g], mcfg.pad_id, mcfg.bos_id, mcfg.eos_id) for g in groups
        ]

    dev_sources = [p.en for p in dev[: recipe.dev_bleu_sentences]]
    dev_refs = [p.de for p in dev[: recipe.dev_bleu_sentences]]

    def evaluate() -> dict:
        loss = trainer.dev_loss(dev_batches)
        model = trainer.model.eval()
        scores = score(translate_many(model, tok, dev_sources), dev_refs)
        probes = translate_many(model, tok, PROBE_SENTENCES[:3])
        return {
            "dev_loss": round(loss, 4),
            "dev_bleu": scores["bleu"],
            "dev_chrf": scores["chrf"],
            "samples": dict(zip(PROBE_SENTENCES[:3], probes, strict=True)),
        }

    def on_best(result: dict) -> None:
        save_checkpoint(
            trainer.model,
            spm_path,
            run_dir / "best",
            card="(in training)\n",
            meta=CheckpointMeta(
                name=recipe.out.name, source_language="en", target_language="de", extra={"best": result}
            ),
            dtype=torch.float16,
        )

    start = time.time()
    fit(trainer, make_epoch, evaluate=evaluate, on_best=on_best, log_path=run_dir / "log.jsonl")
    if is_main():
        plot_curves(run_dir / "log.jsonl", run_dir / "curves.png")
        print(
            f"training stopped at step {trainer.step} after {(time.time() - start) / 60:.1f} min this session; "
            f"best dev BLEU {trainer.best}. Publish with: python -m core publish --run-dir {run_dir} --out {recipe.out}"
        )
