"""Turn plain text into BERT pre-training shards (the ``*.npz`` format of ``data.BERT_FEATURES``).

Input: text files with one sentence per line and a blank line between documents (the layout of
Google's ``create_pretraining_data.py``). Output: ``shard_NNNNN.npz`` files and ``vocab.txt``.

Tokenisation needs no download. Text is lower-cased and split into words and punctuation marks;
every word is then cut into word pieces by greedy longest-match-first against a vocabulary, as
BERT's WordPiece does. The vocabulary is, by default, built from the corpus itself and fully
deterministic: the specials ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0-4), every character seen
(alone and as a ``##`` continuation), then the most frequent words (ties by spelling) until
``--vocab-size``. Rare words therefore become a known prefix plus characters. ``--vocab FILE``
uses an existing one-token-per-line vocabulary instead (a BERT ``vocab.txt`` gives nearly the
real uncased tokenisation). Sentence pairs follow Google's recipe: A is a run of sentences, B is
the actual continuation or, with probability 0.5 (and always for a one-chunk document), a
random span of another document; 15% of the tokens are masked, at most ``--max-predictions``
(80% [MASK], 10% a random token, 10% unchanged).

    python PyTorch/benchmark/make_bert_shards.py corpus.txt --out /data/bert-shards \
        --seq-len 128 --max-predictions 20
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from PyTorch.benchmark.data import write_bert_shard
from PyTorch.benchmark.models.bert import IGNORE_INDEX

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
TOKENIZER = "dlperf-wordpiece-v1"
_WORDS = re.compile(r"\w+|[^\w\s]")
_MAX_WORD_CHARS = 100  # longer "words" become [UNK], as in BERT's tokenizer


def split_words(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def build_vocab(texts: Iterable[str], size: int) -> list[str]:
    """Specials, all characters (plain and ``##``), then the most frequent words."""
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        counts.update(split_words(text))
    chars = sorted({char for word in counts for char in word})
    vocab = [*SPECIALS, *chars, *(f"##{char}" for char in chars)]
    if len(vocab) > size:
        raise ValueError(f"vocab_size {size} is too small for the {len(chars)} characters seen")
    known = set(vocab)
    for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if len(vocab) >= size:
            break
        if word not in known:
            vocab.append(word)
            known.add(word)
    return vocab


class WordPiece:
    def __init__(self, vocab: Sequence[str]) -> None:
        self.vocab = list(vocab)
        self.ids = {token: index for index, token in enumerate(self.vocab)}
        missing = [token for token in SPECIALS if token not in self.ids]
        if missing:
            raise ValueError(f"vocabulary lacks {missing}")
        self.unk = self.ids["[UNK]"]

    def word_ids(self, word: str) -> list[int]:
        if len(word) > _MAX_WORD_CHARS:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else f"##{word[start:end]}"
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    break
                end -= 1
            if end == start:  # not even one character known: the whole word is unknown
                return [self.unk]
            start = end
        return pieces

    def encode(self, text: str) -> list[int]:
        return [piece for word in split_words(text) for piece in self.word_ids(word)]


def read_documents(paths: Sequence[str | Path]) -> list[list[str]]:
    """Documents as lists of sentences; blank lines end a document."""
    documents: list[list[str]] = [[]]
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    documents[-1].append(line)
                elif documents[-1]:
                    documents.append([])
        if documents[-1]:
            documents.append([])
    return [document for document in documents if document]


@dataclass
class Instance:
    tokens: list[int]
    segment_ids: list[int]
    is_random_next: bool


def truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Trim the longer side, from a random end, until the pair fits (Google's recipe)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def document_instances(
    documents: list[list[list[int]]], index: int, seq_len: int, rng: random.Random
) -> list[Instance]:
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]
    document = documents[index]
    instances: list[Instance] = []
    chunk: list[list[int]] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= max_tokens:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:a_end] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                other = index
                for _ in range(10):  # another document if there is one
                    other = rng.randrange(len(documents))
                    if other != index:
                        break
                sentences = documents[other]
                tokens_b: list[int] = []
                for sentence in sentences[rng.randrange(len(sentences)) :]:
                    tokens_b.extend(sentence)
                    if len(tokens_b) >= max_tokens - len(tokens_a):
                        break
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            else:
                is_random_next = False
                tokens_b = [token for sentence in chunk[a_end:] for token in sentence]
            truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            if tokens_a and tokens_b:
                tokens = [CLS, *tokens_a, SEP, *tokens_b, SEP]
                segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                instances.append(Instance(tokens, segments, is_random_next))
            chunk, length = [], 0
        i += 1
    return instances


def mask_tokens(
    tokens: list[int], vocab_size: int, max_predictions: int, rng: random.Random, prob: float
) -> tuple[list[int], list[int], list[int]]:
    """``(masked tokens, positions, original ids)``; positions in increasing order."""
    candidates = [i for i, token in enumerate(tokens) if token not in (CLS, SEP)]
    rng.shuffle(candidates)
    count = min(max_predictions, max(1, round(len(tokens) * prob)), len(candidates))
    positions = sorted(candidates[:count])
    masked = list(tokens)
    for position in positions:
        draw = rng.random()
        if draw < 0.8:
            masked[position] = MASK
        elif draw < 0.9:
            masked[position] = rng.randrange(len(SPECIALS), vocab_size)
        # else: keep the original token
    return masked, positions, [tokens[p] for p in positions]


def instance_arrays(
    instances: Sequence[Instance],
    seq_len: int,
    max_predictions: int,
    vocab_size: int,
    rng: random.Random,
    prob: float,
) -> dict[str, np.ndarray]:
    rows = len(instances)
    arrays = {
        "input_ids": np.full((rows, seq_len), PAD, dtype=np.int32),
        "segment_ids": np.zeros((rows, seq_len), dtype=np.int8),
        "input_mask": np.zeros((rows, seq_len), dtype=np.int8),
        "masked_lm_positions": np.zeros((rows, max_predictions), dtype=np.int32),
        "masked_lm_ids": np.full((rows, max_predictions), IGNORE_INDEX, dtype=np.int32),
        "next_sentence_labels": np.zeros(rows, dtype=np.int8),
    }
    for row, instance in enumerate(instances):
        masked, positions, labels = mask_tokens(
            instance.tokens, vocab_size, max_predictions, rng, prob
        )
        n = len(masked)
        arrays["input_ids"][row, :n] = masked
        arrays["segment_ids"][row, :n] = instance.segment_ids
        arrays["input_mask"][row, :n] = 1
        arrays["masked_lm_positions"][row, : len(positions)] = positions
        arrays["masked_lm_ids"][row, : len(labels)] = labels
        arrays["next_sentence_labels"][row] = int(instance.is_random_next)
    return arrays


def make_bert_shards(
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    seq_len: int = 128,
    max_predictions: int = 20,
    vocab_size: int = 30522,
    vocab_file: str | Path | None = None,
    masked_lm_prob: float = 0.15,
    dupe_factor: int = 1,
    shard_size: int = 16384,
    seed: int = 12345,
) -> list[Path]:
    """Write the shards and ``vocab.txt`` into ``out``; returns the shard paths."""
    if seq_len < 8:
        raise ValueError("seq_len must be at least 8")
    rng = random.Random(seed)
    documents_text = read_documents(inputs)
    if not documents_text:
        raise ValueError(f"no text in {list(map(str, inputs))}")
    if vocab_file:
        vocab = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    else:
        vocab = build_vocab((s for document in documents_text for s in document), vocab_size)
    if len(vocab) > vocab_size:
        raise ValueError(f"the vocabulary has {len(vocab)} tokens, more than {vocab_size}")
    tokenizer = WordPiece(vocab)
    documents = [[tokenizer.encode(s) for s in document] for document in documents_text]
    documents = [[s for s in document if s] for document in documents]
    documents = [document for document in documents if document]

    instances: list[Instance] = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances.extend(document_instances(documents, index, seq_len, rng))
    if not instances:
        raise ValueError("the text gave no sentence pairs (documents too short?)")
    rng.shuffle(instances)

    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    meta = {
        "seq_len": seq_len,
        "max_predictions": max_predictions,
        "vocab_size": len(vocab),
        "tokenizer": TOKENIZER if not vocab_file else f"{TOKENIZER} ({Path(vocab_file).name})",
        "masked_lm_prob": masked_lm_prob,
        "dupe_factor": dupe_factor,
        "seed": seed,
        "special_ids": dict(zip(SPECIALS, range(len(SPECIALS)), strict=True)),
    }
    paths = []
    for number, start in enumerate(range(0, len(instances), shard_size)):
        arrays = instance_arrays(
            instances[start : start + shard_size],
            seq_len,
            max_predictions,
            len(vocab),
            rng,
            masked_lm_prob,
        )
        path = target / f"shard_{number:05d}.npz"
        write_bert_shard(path, arrays, meta)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="text files: a sentence a line, blank between")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--max-predictions", type=int, default=20)
    parser.add_argument("--vocab-size", type=int, default=30522, help="upper bound on token ids")
    parser.add_argument("--vocab", default=None, help="existing vocabulary, a token a line")
    parser.add_argument("--masked-lm-prob", type=float, default=0.15)
    parser.add_argument("--dupe-factor", type=int, default=1, help="maskings of each pair")
    parser.add_argument("--shard-size", type=int, default=16384, help="sequences per shard")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args(argv)
    paths = make_bert_shards(
        args.inputs,
        args.out,
        seq_len=args.seq_len,
        max_predictions=args.max_predictions,
        vocab_size=args.vocab_size,
        vocab_file=args.vocab,
        masked_lm_prob=args.masked_lm_prob,
        dupe_factor=args.dupe_factor,
        shard_size=args.shard_size,
        seed=args.seed,
    )
    print(f"wrote {len(paths)} shard(s) to {args.out}")


if __name__ == "__main__":
    main()
