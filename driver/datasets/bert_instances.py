"""BERT pre-training instances from the user's corpus and vocabulary, made the way Google's
``create_pretraining_data.py`` makes them (as copied into DeepLearningExamples): masked-LM and
next-sentence instances, seeded, one shard at a time; every BERT format writes these.

The corpus is plain UTF-8 text, one sentence per line, a blank line between documents (the end
of a file ends a document too): one file, or a folder whose files are read in name order. Its
documents are split into ``shards`` contiguous runs; each shard's instances are made from its own
documents only, with ``random.Random(seed)`` as DeepLearningExamples' ``bertPrep.py`` gives every
shard's run the same ``--random_seed``. The corpus is read twice: once to count documents and
note where each shard starts, once per shard to tokenize just that shard.

Tokens are BERT's WordPiece, by the ``tokenizers`` package's parts set up as BERT's
``FullTokenizer`` (text cleaning, Chinese characters split, lower case and accents stripped where
asked, punctuation split, greedy longest-match WordPiece, words over 200 characters [UNK]).
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.files import sha256_file
from driver.schema import ConfigError, parse_json

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[UNK]")
COMMAND_LINE = "command line"
MAX_SEQ_LENGTH = 512  # BERT-base's max_position_embeddings
MAX_DUPE_FACTOR = 100  # bertPrep.py's is 5: each copy is the corpus's instances once more


@dataclass(frozen=True)
class Parameters:
    """create_pretraining_data.py's parameters; defaults are DeepLearningExamples' phase 1 (the
    one DLPerf's BERT rows ran: sequence 128, 20 predictions) with bertPrep.py's dupe factor 5
    and seed 12345."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 5
    short_seq_prob: float = 0.1
    seed: int = 12345
    lower_case: bool = True

    def check(self) -> None:
        if not 5 <= self.max_seq_length <= MAX_SEQ_LENGTH:
            # [CLS] A [SEP] B [SEP] with A and B one token at least; at most the positions the
            # bert_config.json written beside holds (max_position_embeddings)
            raise ConfigError(
                COMMAND_LINE, "--max-seq-length", f"must be 5 to {MAX_SEQ_LENGTH}"
            )
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ConfigError(
                COMMAND_LINE, "--max-predictions-per-seq", "must be 1 to --max-seq-length"
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ConfigError(COMMAND_LINE, "--masked-lm-prob", "must be in (0, 1]")
        if not 1 <= self.dupe_factor <= MAX_DUPE_FACTOR:
            raise ConfigError(COMMAND_LINE, "--dupe-factor", f"must be 1 to {MAX_DUPE_FACTOR}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ConfigError(COMMAND_LINE, "--short-seq-prob", "must be in [0, 1]")


@dataclass(frozen=True)
class Instance:
    tokens: list[str]
    segment_ids: list[int]
    is_random_next: bool
    masked_lm_positions: list[int]
    masked_lm_labels: list[str]


class Vocabulary:
    """BERT's ``vocab.txt`` (one token a line, the id its line number), or a gluon-nlp
    vocabulary as its ``BERTVocab.to_json`` saves it (``idx_to_token``: gluon-nlp's ids, in
    an order of its own), and its WordPiece tokenizer."""

    def __init__(self, path: Path, lower_case: bool) -> None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(path, "(file)", "does not exist; give BERT's vocab.txt")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(path, "(file)", f"cannot be read as UTF-8 text ({error})") from None
        self.path = path
        self.kind = "gluonnlp-json" if text.lstrip().startswith("{") else "vocab.txt"
        self.words = self._json_words(text) if self.kind == "gluonnlp-json" else [
            w.strip() for w in text.splitlines()
        ]  # fmt: skip
        self.ids: dict[str, int] = {}
        for number, word in enumerate(self.words):
            if word:
                self.ids.setdefault(word, number)
        for token in SPECIAL_TOKENS:
            if token not in self.ids:
                raise ConfigError(path, token, "is not in the vocabulary; give BERT's vocab.txt")
        try:
            from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
        except ImportError:
            raise ConfigError(
                path,
                "tokenizer",
                "BERT's WordPiece needs the tokenizers package: pip install 'dlperf[data]'",
            ) from None
        # BERT's FullTokenizer: BasicTokenizer (clean, split CJK, lower case and strip accents
        # where asked, split on punctuation), then WordPiece with its 200-character word limit
        model = models.WordPiece(dict(self.ids), unk_token="[UNK]", max_input_chars_per_word=200)
        self._tokenizer = Tokenizer(model)
        self._tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lower_case,
            lowercase=lower_case,
        )  # fmt: skip
        self._tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self.sha256 = sha256_file(path)

    def _json_words(self, text: str) -> list[str]:
        document = parse_json(text, self.path)
        words = document.get("idx_to_token") if isinstance(document, dict) else None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ConfigError(
                self.path, "idx_to_token", "is not a list of tokens (gluon-nlp's vocab JSON)"
            )
        return words

    def tokenize(self, line: str) -> list[str]:
        return self._tokenizer.encode(line, add_special_tokens=False).tokens

    def to_ids(self, tokens: list[str]) -> list[int]:
        return [self.ids[t] for t in tokens]


@dataclass
class Corpus:
    """Where each document starts: a file's index and byte offset, in reading order."""

    files: list[Path]
    starts_file: array
    starts_offset: array

    @property
    def documents(self) -> int:
        return len(self.starts_file)

    def facts(self) -> dict[str, Any]:
        """For the manifest: what the set was made from, without the corpus's path."""
        listing = hashlib.sha256()
        for path in self.files:
            listing.update(f"{path.name}\t{path.stat().st_size}\n".encode())
        return {"files": len(self.files), "documents": self.documents,
                "listing_sha256": listing.hexdigest()}  # fmt: skip

    def shard_ranges(self, shards: int) -> list[tuple[int, int]]:
        """``shards`` contiguous runs of documents, two at least each (a random next sentence
        comes from another document of the shard)."""
        if shards < 1:
            raise ConfigError(COMMAND_LINE, "--shards", "must be 1 or more")
        if self.documents < 2 * shards:
            raise ConfigError(
                self.files[0].parent if len(self.files) > 1 else self.files[0],
                "documents",
                f"{self.documents} document(s) for {shards} shard(s): each shard needs 2 at "
                "least (next-sentence prediction draws from another document); separate "
                "documents with a blank line, or give fewer --shards",
            )
        bounds = [self.documents * k // shards for k in range(shards + 1)]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def read(self, first: int, end: int) -> Iterator[list[str]]:
        """The lines (stripped, non-blank) of documents ``first`` to ``end - 1``."""
        remaining = end - first
        file_index, offset = self.starts_file[first], self.starts_offset[first]
        while remaining > 0:
            with self.files[file_index].open("rb") as stream:
                stream.seek(offset)
                document: list[str] = []
                for raw in stream:
                    line = raw.decode("utf-8").strip()
                    if line:
                        document.append(line)
                    elif document:
                        yield document
                        document, remaining = [], remaining - 1
                        if not remaining:
                            return
                if document:  # the end of a file ends its last document
                    yield document
                    remaining -= 1
            file_index, offset = file_index + 1, 0


def scan_corpus(source: Path) -> Corpus:
    """Count the corpus's documents and note where each starts; a missing, empty, unreadable or
    non-UTF-8 file is a ConfigError naming it (and the line)."""
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise ConfigError(source, "(folder)", "holds no text files; give the corpus")
    elif source.is_file():
        files = [source]
    elif source.exists():  # a FIFO or device: reading it could block
        raise ConfigError(source, "(file)", "is not a regular file; give the corpus's text")
    else:
        raise ConfigError(source, "(file)", "does not exist; give the corpus (file or folder)")
    starts_file, starts_offset = array("i"), array("q")
    for index, path in enumerate(files):
        try:
            stream = path.open("rb")
        except OSError as error:
            raise ConfigError(path, "(file)", f"cannot be read ({error.strerror})") from None
        with stream:
            offset, in_document = 0, False
            for number, raw in enumerate(stream, start=1):
                try:
                    blank = not raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise ConfigError(
                        path, f"line {number}", "is not UTF-8 text; convert the corpus to UTF-8"
                    ) from None
                if not blank and not in_document:
                    starts_file.append(index)
                    starts_offset.append(offset)
                in_document = not blank
                offset += len(raw)
    if not starts_file:
        raise ConfigError(
            source, "(file)", "holds no text: one sentence a line, a blank line between documents"
        )
    return Corpus(files, starts_file, starts_offset)


def shard_instances(
    corpus: Corpus, span: tuple[int, int], vocab: Vocabulary, params: Parameters
) -> list[Instance]:
    """create_pretraining_data.py's ``create_training_instances`` over one shard's documents."""
    rng = random.Random(params.seed)
    documents = []
    for lines in corpus.read(*span):
        document = [tokens for tokens in map(vocab.tokenize, lines) if tokens]
        if document:
            documents.append(document)
    if len(documents) < 2:
        raise ConfigError(
            corpus.files[corpus.starts_file[span[0]]],
            "documents",
            f"documents {span[0] + 1} to {span[1]} hold {len(documents)} with any token: a "
            "shard needs 2 (give a longer corpus or fewer --shards)",
        )
    rng.shuffle(documents)
    vocab_words = list(vocab.ids)  # each token once, in vocab.txt's order
    instances: list[Instance] = []
    for _ in range(params.dupe_factor):
        for index in range(len(documents)):
            instances.extend(_document_instances(documents, index, vocab_words, params, rng))
    rng.shuffle(instances)
    return instances


def _document_instances(
    documents: list[list[list[str]]],
    index: int,
    vocab_words: list[str],
    params: Parameters,
    rng: random.Random,
) -> list[Instance]:
    """One document's instances: segments A and B along its sentences; B is another
    document's text half of the time (always when the chunk is one sentence)."""
    document = documents[index]
    max_num_tokens = params.max_seq_length - 3  # [CLS], [SEP], [SEP]
    target = max_num_tokens
    if rng.random() < params.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    instances: list[Instance] = []
    chunk: list[list[str]] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for segment in chunk[:a_end] for t in segment]
            tokens_b: list[str] = []
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                target_b = target - len(tokens_a)
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                if other == index:
                    is_random_next = False
                random_document = documents[other]
                for segment in random_document[rng.randint(0, len(random_document) - 1) :]:
                    tokens_b.extend(segment)
                    if len(tokens_b) >= target_b:
                        break
                i -= len(chunk) - a_end  # the unused sentences go back for the next chunk
            else:
                is_random_next = False
                tokens_b = [t for segment in chunk[a_end:] for t in segment]
            _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
            tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            tokens, positions, labels = _mask(tokens, vocab_words, params, rng)
            instances.append(Instance(tokens, segment_ids, is_random_next, positions, labels))
            chunk, length = [], 0
        i += 1
    return instances


def _truncate_pair(a: list[str], b: list[str], max_num_tokens: int, rng: random.Random) -> None:
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _mask(
    tokens: list[str], vocab_words: list[str], params: Parameters, rng: random.Random
) -> tuple[list[str], list[int], list[str]]:
    """Masked-LM predictions: 15% of the tokens (at most max_predictions_per_seq), each
    [MASK] 80% of the time, kept 10%, a random vocabulary word 10%."""
    candidates = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
    rng.shuffle(candidates)
    output = list(tokens)
    count = min(params.max_predictions_per_seq,
                max(1, int(round(len(tokens) * params.masked_lm_prob))))  # fmt: skip
    chosen: list[int] = []
    for index in candidates:
        if len(chosen) >= count:
            break
        if rng.random() < 0.8:
            output[index] = "[MASK]"
        elif rng.random() < 0.5:
            output[index] = tokens[index]
        else:
            output[index] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
        chosen.append(index)
    chosen.sort()
    return output, chosen, [tokens[i] for i in chosen]


def features(instances: list[Instance], vocab: Vocabulary, params: Parameters) -> dict[str, Any]:
    """The instances as create_pretraining_data.py's padded arrays (numpy, int32; weights
    float32): ``input_ids``, ``input_mask``, ``segment_ids``, ``masked_lm_positions``,
    ``masked_lm_ids``, ``masked_lm_weights``, ``next_sentence_labels`` (1: B is random)."""
    import numpy as np

    count, seq, preds = len(instances), params.max_seq_length, params.max_predictions_per_seq
    out = {
        name: np.zeros((count, width), dtype=np.int32)
        for name, width in (("input_ids", seq), ("input_mask", seq), ("segment_ids", seq),
                            ("masked_lm_positions", preds), ("masked_lm_ids", preds))
    }  # fmt: skip
    out["masked_lm_weights"] = np.zeros((count, preds), dtype=np.float32)
    out["next_sentence_labels"] = np.zeros(count, dtype=np.int32)
    for row, instance in enumerate(instances):
        length, masked = len(instance.tokens), len(instance.masked_lm_positions)
        out["input_ids"][row, :length] = vocab.to_ids(instance.tokens)
        out["input_mask"][row, :length] = 1
        out["segment_ids"][row, :length] = instance.segment_ids
        out["masked_lm_positions"][row, :masked] = instance.masked_lm_positions
        out["masked_lm_ids"][row, :masked] = vocab.to_ids(instance.masked_lm_labels)
        out["masked_lm_weights"][row, :masked] = 1.0
        out["next_sentence_labels"][row] = int(instance.is_random_next)
    return out
