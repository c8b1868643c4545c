"""``dlperf data tokens``: a token file for Llama from the user's text and tokenizer.

The format (read by ``PyTorch/benchmark/data.py`` for ``--model llama --dataset real``): a folder
holding

- ``tokens.bin``: token ids as a flat array of little-endian unsigned 32-bit integers (no
  header; ``numpy.memmap(path, dtype="<u4")`` reads it), the documents one after another, each
  followed by the end-of-text id where the tokenizer has one;
- ``dlperf-dataset.json``: the manifest (``driver/datasets/manifest.py``), format ``tokens``,
  whose ``source`` says the tokenizer (its kind, file name and SHA-256), ``vocab_size``, the
  ``eos_id``, the number of ``tokens`` and ``documents`` and the text files (name, SHA-256).

A training sample is ``seq_len + 1`` consecutive tokens (inputs and next-token labels); the
script refuses a file whose size is no multiple of 4 bytes, that holds fewer tokens than one
step needs, or that has an id at or past the model's vocabulary, naming the file and the first
bad offset.

Tokenizers: ``bytes`` (the UTF-8 bytes as ids 0..255, end of text 256: vocabulary 257, no
dependency), or a Hugging Face ``tokenizer.json`` read with the ``tokenizers`` package where it
is installed in the driver's environment.
"""

from __future__ import annotations

import argparse
import sys
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from driver.datasets.manifest import claim, write_manifest
from driver.files import ensure_dir, sha256_file, write_bytes
from driver.schema import ConfigError

FORMAT = "tokens"
TOKENS_FILE = "tokens.bin"
DTYPE = "<u4"  # numpy's name: little-endian uint32
BYTE_VOCAB = 257  # 256 byte values and the end-of-text id
BYTE_EOS = 256
COMMAND_LINE = "command line"


class Tokenizer:
    """Text -> ids, with the vocabulary size and end-of-text id a token file records."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        if spec == "bytes":
            self.kind, self.vocab_size, self.eos_id = "bytes", BYTE_VOCAB, BYTE_EOS
            self.sha256: str | None = None
            self._encode = lambda text: list(text.encode("utf-8"))
            return
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(
                COMMAND_LINE, "--tokenizer", f"{spec!r} is no file; give a tokenizer.json or bytes"
            )
        try:
            from tokenizers import Tokenizer as HfTokenizer
        except ImportError:
            raise ConfigError(
                path,
                "tokenizer",
                "reading a tokenizer.json needs the tokenizers package in the driver's "
                "environment (.venv/bin/pip install tokenizers), or use --tokenizer bytes",
            ) from None
        try:
            loaded = HfTokenizer.from_file(str(path))
        except Exception as error:  # noqa: BLE001 - the library's own parse errors
            raise ConfigError(path, "tokenizer", f"not a tokenizers JSON file ({error})") from None
        self.kind, self.vocab_size = "tokenizers-json", int(loaded.get_vocab_size())
        self.sha256 = sha256_file(path)
        self.eos_id = next(
            (loaded.token_to_id(t) for t in ("<|end_of_text|>", "</s>", "<|endoftext|>")
             if loaded.token_to_id(t) is not None),
            None,
        )  # fmt: skip
        self._encode = lambda text: loaded.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def describe(self) -> dict[str, Any]:
        name = "bytes" if self.kind == "bytes" else Path(self.spec).name
        return {"kind": self.kind, "name": name, "sha256": self.sha256}


def read_texts(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    texts = []
    for path in paths:
        if path.exists() and not path.is_file():  # a FIFO or device: the read could block
            raise ConfigError(path, "text", "is not a regular file; give the text files")
        try:
            texts.append((path, path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ConfigError(
                path, "text", "no such file; give the text files to tokenize"
            ) from None
        except UnicodeDecodeError as error:
            raise ConfigError(
                path, "text", f"not UTF-8 at byte {error.start}; convert the file to UTF-8"
            ) from None
    return texts


def make_token_file(texts: list[Path], tokenizer_spec: str, out: Path) -> dict[str, Any]:
    """Tokenize ``texts`` (one document per file, blank-line separated paragraphs kept) into
    ``out/tokens.bin`` and write the manifest; returns the manifest's source and SHA-256."""
    if not texts:
        raise ConfigError(COMMAND_LINE, "text", "no text files given")
    tokenizer = Tokenizer(tokenizer_spec)
    ids = array("I")
    documents = 0
    for _path, text in read_texts(texts):
        tokens = tokenizer.encode(text)
        if tokenizer.eos_id is not None:
            tokens.append(tokenizer.eos_id)
        ids.extend(tokens)
        documents += 1
    if sys.byteorder != "little":
        ids.byteswap()
    source = {
        "tokenizer": tokenizer.describe(),
        "vocab_size": tokenizer.vocab_size,
        "eos_id": tokenizer.eos_id,
        "dtype": DTYPE,
        "tokens": len(ids),
        "documents": documents,
        "texts": [
            {"name": path.name, "sha256": sha256_file(path)}
            for path in texts
        ],
    }
    claim(ensure_dir(out), FORMAT, {"source": source})  # never over another set
    write_bytes(out / TOKENS_FILE, ids.tobytes())
    digest = write_manifest(out, FORMAT, [out / TOKENS_FILE], source)
    return {**source, "manifest_sha256": digest}


def cmd_tokens(args: argparse.Namespace) -> int:
    made = make_token_file([Path(p) for p in args.text], args.tokenizer, Path(args.out))
    print(
        f"{args.out}/{TOKENS_FILE}: {made['tokens']} tokens of {made['documents']} document(s), "
        f"vocabulary {made['vocab_size']}; manifest sha256 {made['manifest_sha256']}"
    )
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        FORMAT, help="a flat uint32 token file (Llama's real data) from your text"
    )
    parser.add_argument("text", nargs="+", help="UTF-8 text files, one document each")
    parser.add_argument("--out", required=True, help="the data set folder to write")
    parser.add_argument(
        "--tokenizer",
        default="bytes",
        help="bytes (UTF-8 bytes, vocabulary 257) or a tokenizer.json (needs tokenizers)",
    )
    parser.set_defaults(func=cmd_tokens)
