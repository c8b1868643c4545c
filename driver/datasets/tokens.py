"""``dlperf data tokens``: a token file for Llama from the user's text and tokenizer, at corpus
scale.

Input: any number of files and folders, read as a stream (one document in memory at a time):

- a ``.txt`` (or ``.text``, ``.md``) file is one document;
- a ``.jsonl`` file (``.jsonl.gz`` too) holds one document per line, a JSON object whose
  ``text`` is a string (C4's and most Hugging Face dumps' layout);
- a ``.parquet`` file holds one document per row of its ``text`` column (read in record
  batches with ``pyarrow`` where it is installed);
- a folder holds such files, read in name order, its subfolders too; a symlink in it is
  followed only where it stays inside the folder.

Output, a folder holding

- ``tokens.bin``: token ids as a flat array of little-endian unsigned 32-bit integers (no
  header; ``numpy.memmap(path, dtype="<u4")`` reads it), the documents one after another, each
  followed by the end-of-text id where the tokenizer has one; read by
  ``PyTorch/benchmark/data.py`` for ``--model llama --dataset real``;
- ``megatron_text_document.bin`` and ``.idx``: the same documents in Megatron's indexed data
  set (``megatron.core.datasets.indexed_dataset``, as read in megatron-core 0.14.0): the ``.bin``
  holds the ids as uint16 where the vocabulary has fewer than 65,500 ids, else int32; the
  ``.idx`` holds the header ``MMIDIDX\\x00\\x00``, version 1 (uint64), the dtype's code (uint8: 8
  uint16, 4 int32), the number of sequences and the number of document indices (uint64 each),
  then each sequence's length (int32), its byte offset in the ``.bin`` (int64) and the document
  indices ``0 .. documents`` (int64): one sequence a document, its end-of-text id included
  (``preprocess_data.py --append-eod``). ``--data-path <folder>/megatron_text_document`` reads it;
- ``dlperf-dataset.json``: the manifest (``driver/datasets/manifest.py``), format ``tokens``,
  whose ``source`` says the tokenizer (its kind, file name and SHA-256), ``vocab_size``, the
  ``eos_id``, the counts of ``tokens``, ``documents`` and input files and bytes, and the inputs'
  identity without listing their documents: ``inputs_sha256``, the SHA-256 over every input
  file's name, size and SHA-256 in reading order (the files themselves listed up to
  :data:`LISTED_INPUTS`).

Memory stays bounded whatever the corpus: a document's ids at a time, and the Megatron index's
per-document lengths spooled to a temporary file, not held.

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
import gzip
import hashlib
import io
import json
import shutil
import stat
import struct
import sys
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from driver.datasets.manifest import claim, resolved_inside, write_manifest
from driver.files import atomic_file, ensure_dir, sha256_file
from driver.schema import ConfigError, stat_of

FORMAT = "tokens"
TOKENS_FILE = "tokens.bin"
MEGATRON_PREFIX = "megatron_text_document"
DTYPE = "<u4"  # numpy's name: little-endian uint32
BYTE_VOCAB = 257  # 256 byte values and the end-of-text id
BYTE_EOS = 256
COMMAND_LINE = "command line"
LISTED_INPUTS = 100  # inputs listed by name in the manifest; beyond, their count and digest
TEXT_SUFFIXES = (".txt", ".text", ".md")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
PARQUET_SUFFIXES = (".parquet",)
# Megatron's index (megatron/core/datasets/indexed_dataset.py, _IndexWriter)
INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
MEGATRON_DTYPES = {"uint16": (8, "H"), "int32": (4, "i")}  # name -> (code, array typecode)
UINT16_VOCAB = 65_500  # megatron's best_fitting_dtype: uint16 below this vocabulary size
CHUNK = 1 << 16  # ids or index entries written at a time


class Tokenizer:
    """Text -> ids, with the vocabulary size and end-of-text id a token file records."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        if spec == "bytes":
            self.kind, self.vocab_size, self.eos_id = "bytes", BYTE_VOCAB, BYTE_EOS
            self.sha256: str | None = None
            self._encode: Callable[[str], Sequence[int]] = lambda text: text.encode("utf-8")
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

    def encode(self, text: str) -> array:
        """The ids of ``text`` and the end-of-text id, as uint32."""
        ids = array("I", iter(self._encode(text)))  # iter: never bytes read as raw uint32s
        if self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def describe(self) -> dict[str, Any]:
        name = "bytes" if self.kind == "bytes" else Path(self.spec).name
        return {"kind": self.kind, "name": name, "sha256": self.sha256}


# --- input: documents, streamed ------------------------------------------------------------


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    for kind, suffixes in (("text", TEXT_SUFFIXES), ("jsonl", JSONL_SUFFIXES),
                           ("parquet", PARQUET_SUFFIXES)):  # fmt: skip
        if name.endswith(suffixes):
            return kind
    return None


def input_files(paths: Sequence[Path]) -> list[Path]:
    """The files ``paths`` name, a folder's in name order (its subfolders too), each checked:
    a regular file of a known kind, a symlink in a folder only where it stays inside it."""
    if not paths:
        raise ConfigError(COMMAND_LINE, "text", "no input given; give text, JSONL or parquet")
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            for inner in sorted(p for p in path.rglob("*") if not p.is_dir()):
                resolved_inside(
                    inner,
                    path,
                    missing="is a dangling or looping symlink; remove it or fix its target",
                    outside="copy the file into the folder or remove the link",
                )
                files.append(_checked(inner))
        else:
            files.append(_checked(path))
    return files


def _checked(path: Path) -> Path:
    mode = stat_of(path, "text", "no such file; give the files to tokenize").st_mode
    if not stat.S_ISREG(mode):  # a FIFO or a device: a read could block
        raise ConfigError(path, "text", "is not a regular file; give the files to tokenize")
    if _kind(path) is None:
        raise ConfigError(
            path,
            "text",
            f"is of no kind the command reads ({', '.join(TEXT_SUFFIXES + JSONL_SUFFIXES)}: "
            f"text and JSON lines with a 'text' field; {PARQUET_SUFFIXES[0]}: a 'text' "
            "column); rename it or leave it out",
        )
    return path


class _Hashing(io.RawIOBase):
    """A file read through, its SHA-256 and size taken on the way (one read of each input)."""

    def __init__(self, raw: IO[bytes], path: Path) -> None:
        self.raw, self.path, self.digest, self.size = raw, path, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            count = self.raw.readinto(buffer)  # type: ignore[attr-defined]
        except OSError as error:  # an input's, never taken for the output's (atomic_file)
            raise ConfigError(self.path, "text", f"cannot be read ({error.strerror})") from None
        if count:
            view = memoryview(buffer)[:count]
            self.digest.update(view)
            self.size += count
        return count or 0


def _documents(path: Path, hashing: _Hashing) -> Iterator[str]:
    """The documents of one input file, read through ``hashing``."""
    kind = _kind(path)
    if kind == "parquet":
        yield from _parquet_documents(path, hashing)
        return
    binary: IO[bytes] = io.BufferedReader(hashing)
    if path.name.lower().endswith(".gz"):
        binary = gzip.GzipFile(fileobj=binary)  # type: ignore[assignment]
    text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
    try:
        if kind == "text":
            yield text.read()
            return
        for number, line in enumerate(text, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ConfigError(
                    path, f"line {number}", f"not JSON ({error.msg}); one object per line"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ConfigError(
                    path,
                    f"line {number}",
                    "has no 'text' string; each line must be an object with the document's "
                    "text in 'text'",
                )
            yield record["text"]
    except UnicodeDecodeError as error:
        raise ConfigError(
            path, "text", f"not UTF-8 (byte {error.start} of a chunk); convert it to UTF-8"
        ) from None
    except (OSError, EOFError) as error:  # a truncated or corrupt gzip stream
        raise ConfigError(path, "text", f"cannot be read to its end ({error})") from None


def _parquet_documents(path: Path, hashing: _Hashing) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            path,
            "text",
            "reading parquet needs pyarrow in the driver's environment (.venv/bin/pip install "
            "pyarrow), or give the documents as JSON lines",
        ) from None
    while hashing.read(CHUNK):  # hashed whole first: parquet is read by its footer
        pass
    try:
        table = pq.ParquetFile(path)
        if "text" not in table.schema_arrow.names:
            raise ConfigError(path, "text", "has no 'text' column; name the documents' column text")
        for batch in table.iter_batches(columns=["text"], batch_size=1024):
            for value in batch.column(0).to_pylist():
                if not isinstance(value, str):
                    raise ConfigError(path, "text", f"a 'text' value is {value!r}, not a string")
                yield value
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - pyarrow's own errors on a broken file
        raise ConfigError(path, "text", f"not a readable parquet file ({error})") from None


# --- output ----------------------------------------------------------------------------------


@dataclass
class _Counts:
    tokens: int = 0
    documents: int = 0
    input_bytes: int = 0
    inputs: list[dict[str, Any]] = field(default_factory=list)
    inputs_digest: Any = field(default_factory=hashlib.sha256)


def _write_index(index: IO[bytes], dtype: str, lengths: IO[bytes], documents: int) -> None:
    """Megatron's ``.idx`` of ``documents`` sequences, their lengths (int32) read back from
    ``lengths`` twice (once copied, once summed into byte offsets), in chunks."""
    code, typecode = MEGATRON_DTYPES[dtype]
    itemsize = array(typecode).itemsize
    index.write(INDEX_HEADER + struct.pack("<Q", INDEX_VERSION) + struct.pack("<B", code))
    index.write(struct.pack("<Q", documents) + struct.pack("<Q", documents + 1))
    lengths.seek(0)
    shutil.copyfileobj(lengths, index, CHUNK * 4)
    lengths.seek(0)
    offset = 0
    while chunk := lengths.read(CHUNK * 4):
        sizes = array("i")
        sizes.frombytes(chunk)
        pointers = array("q")
        for size in sizes:
            pointers.append(offset)
            offset += size * itemsize
        index.write(_little(pointers).tobytes())
    for start in range(0, documents + 1, CHUNK):
        index.write(_little(array("q", range(start, min(start + CHUNK, documents + 1)))).tobytes())


def _little(values: array) -> array:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values


def make_token_file(inputs: Sequence[Path], tokenizer_spec: str, out: Path) -> dict[str, Any]:
    """Tokenize the documents of ``inputs`` (files and folders, see the module docstring) into
    ``out``'s token file and Megatron data set, and write the manifest; returns the manifest's
    source and SHA-256."""
    files = input_files(inputs)
    tokenizer = Tokenizer(tokenizer_spec)
    dtype = "uint16" if tokenizer.vocab_size < UINT16_VOCAB else "int32"
    listing = [{"name": str(path), "bytes": path.stat().st_size} for path in files]
    job = {"tokenizer": tokenizer.describe(), "inputs": listing, "megatron_dtype": dtype}
    claim(ensure_dir(out), FORMAT, job)  # never over another set; the same job resumes
    counts = _Counts()
    typecode = MEGATRON_DTYPES[dtype][1]
    with (
        atomic_file(out / TOKENS_FILE) as flat,
        atomic_file(out / f"{MEGATRON_PREFIX}.bin") as megatron,
        tempfile.TemporaryFile(dir=out) as lengths,
    ):
        for path in files:
            try:
                raw = path.open("rb")
            except OSError as error:
                raise ConfigError(path, "text", f"cannot be read ({error.strerror})") from None
            with raw:
                hashing = _Hashing(raw, path)
                for text in _documents(path, hashing):
                    ids = tokenizer.encode(text)
                    flat.write(_little(ids).tobytes())
                    megatron.write(_little(array(typecode, ids)).tobytes())
                    lengths.write(_little(array("i", [len(ids)])).tobytes())
                    counts.tokens += len(ids)
                    counts.documents += 1
                while hashing.read(CHUNK):  # what the reader left unread (a JSONL's tail)
                    pass
            entry = {"name": path.name, "bytes": hashing.size, "sha256": hashing.digest.hexdigest()}
            counts.inputs_digest.update(json.dumps(entry, sort_keys=True).encode() + b"\n")
            counts.input_bytes += hashing.size
            if len(counts.inputs) < LISTED_INPUTS:
                counts.inputs.append(entry)
        if counts.documents == 0:
            raise ConfigError(COMMAND_LINE, "text", "the inputs hold no document")
        with atomic_file(out / f"{MEGATRON_PREFIX}.idx") as index:
            _write_index(index, dtype, lengths, counts.documents)
    source = {
        "tokenizer": tokenizer.describe(),
        "vocab_size": tokenizer.vocab_size,
        "eos_id": tokenizer.eos_id,
        "dtype": DTYPE,
        "tokens": counts.tokens,
        "documents": counts.documents,
        "megatron": {"prefix": MEGATRON_PREFIX, "dtype": dtype},
        "input_files": len(files),
        "input_bytes": counts.input_bytes,
        "inputs_sha256": counts.inputs_digest.hexdigest(),
        "inputs": counts.inputs,  # the first LISTED_INPUTS
    }
    outputs = [out / TOKENS_FILE, out / f"{MEGATRON_PREFIX}.bin", out / f"{MEGATRON_PREFIX}.idx"]
    digest = write_manifest(out, FORMAT, outputs, source)
    return {**source, "manifest_sha256": digest}


def cmd_tokens(args: argparse.Namespace) -> int:
    made = make_token_file([Path(p) for p in args.text], args.tokenizer, Path(args.out))
    print(
        f"{args.out}/{TOKENS_FILE} and {MEGATRON_PREFIX}.bin/.idx: {made['tokens']} tokens of "
        f"{made['documents']} document(s) from {made['input_files']} file(s), vocabulary "
        f"{made['vocab_size']}; manifest sha256 {made['manifest_sha256']}"
    )
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        FORMAT, help="Llama's real data (flat uint32 and Megatron's .bin/.idx) from your text"
    )
    parser.add_argument(
        "text",
        nargs="+",
        help="text files (one document each), JSON lines or parquet with a 'text' field, or "
        "folders of them",
    )
    parser.add_argument("--out", required=True, help="the data set folder to write")
    parser.add_argument(
        "--tokenizer",
        default="bytes",
        help="bytes (UTF-8 bytes, vocabulary 257) or a tokenizer.json (needs tokenizers)",
    )
    parser.set_defaults(func=cmd_tokens)
