"""The framework's own record writers, run inside that framework's environment (stdlib and
the framework only: the driver's dependencies are not there), as::

    python -m driver.datasets._writers KIND JOB.json  (KIND: a key of WRITERS)

JOB.json: ``{"shards": [{"path": ..., "images": [[jpeg, label, wnid], ...]}]}``, or for BERT
``{"shards": [{"path": ..., "partial": ..., "features": NPZ}]}`` (the padded arrays of
``bert_instances.features``, which the kit removes when the job ends). Each shard is
written to a ``.partial`` file and renamed when whole; a shard already there is skipped, so an
interrupted preparation resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator

# the line a failed writer leaves for the kit, which shows it alone (not the log around it)
ERROR_TAG = "dlperf-writer-error:"


def _partial(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.partial")


def tfrecord(shard: dict) -> None:
    """TF-slim's ``build_imagenet_data.py`` features, which tensorflow/models and NGC TF1 read:
    the JPEG bytes as they are, 1-based labels (their readers subtract 1), no boxes."""
    import tensorflow as tf

    def feature(value: object) -> tf.train.Feature:
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        data = value if isinstance(value, bytes) else str(value).encode()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))

    partial = _partial(shard["path"])
    with tf.io.TFRecordWriter(partial) as writer:
        for jpeg, label, wnid in shard["images"]:
            with open(jpeg, "rb") as stream:
                data = stream.read()
            height, width, channels = (int(v) for v in tf.image.extract_jpeg_shape(data))
            features = {
                "image/encoded": feature(data),
                "image/format": feature("JPEG"),
                "image/filename": feature(os.path.basename(jpeg)),
                "image/class/label": feature(label + 1),
                "image/class/synset": feature(wnid),
                "image/height": feature(height),
                "image/width": feature(width),
                "image/channels": feature(channels),
                "image/colorspace": feature("RGB"),
            }
            example = tf.train.Example(features=tf.train.Features(feature=features))
            # deterministic: the features map in key order, so the same images give the same
            # bytes (and the set the same identity) on every run
            writer.write(example.SerializeToString(deterministic=True))
    os.replace(partial, shard["path"])


def recordio(shard: dict) -> None:
    """MXNet's indexed RecordIO (``.rec`` + ``.idx``), as ``im2rec.py --pass-through`` packs it:
    the JPEG bytes as they are, the label in the record header."""
    import mxnet as mx

    rec = shard["path"]
    idx = rec[: -len(".rec")] + ".idx"
    partial_rec, partial_idx = _partial(rec), _partial(idx)
    writer = mx.recordio.MXIndexedRecordIO(partial_idx, partial_rec, "w")
    for number, (jpeg, label, _wnid) in enumerate(shard["images"]):
        with open(jpeg, "rb") as stream:
            header = mx.recordio.IRHeader(0, float(label), number, 0)
            writer.write_idx(number, mx.recordio.pack(header, stream.read()))
    writer.close()
    os.replace(partial_idx, idx)  # the index first: a .rec without its .idx is redone
    os.replace(partial_rec, rec)


def ofrecord(shard: dict) -> None:
    """OneFlow-Benchmark's ImageNet OFRecord part (its ``tools/imagenet_ofrecord.py``): each
    record an 8-byte little-endian length, then a serialized ``OFRecord`` of OneFlow's own
    ``record_pb2``; ``encoded`` the JPEG bytes as they are, ``class/label`` 0-based int32."""
    import io
    import struct

    from oneflow.core.record import record_pb2
    from PIL import Image

    def feature(value: object) -> record_pb2.Feature:
        if isinstance(value, int):
            return record_pb2.Feature(int32_list=record_pb2.Int32List(value=[value]))
        data = value if isinstance(value, bytes) else str(value).encode()
        return record_pb2.Feature(bytes_list=record_pb2.BytesList(value=[data]))

    partial = _partial(shard["path"])
    with open(partial, "wb") as out:
        for jpeg, label, wnid in shard["images"]:
            with open(jpeg, "rb") as stream:
                data = stream.read()
            with Image.open(io.BytesIO(data)) as image:  # the header only: no decoding
                (width, height), channels = image.size, len(image.getbands())
            features = {
                "encoded": feature(data),
                "class/label": feature(label),
                "class/synset": feature(wnid),
                "filename": feature(os.path.basename(jpeg)),
                "format": feature("JPEG"),
                "height": feature(height),
                "width": feature(width),
                "channels": feature(channels),
                "colorspace": feature("RGB"),
            }
            payload = record_pb2.OFRecord(feature=features).SerializeToString(deterministic=True)
            out.write(struct.pack("<q", len(payload)))
            out.write(payload)
    os.replace(partial, shard["path"])


def _bert_rows(shard: dict, floats: Callable, ints: Callable) -> Iterator[dict]:
    """The features of each row of the shard's padded arrays (``bert_instances.features``, a
    ``.npz``, read now): ``masked_lm_weights`` made by ``floats``, the others by ``ints``."""
    import numpy as np

    with np.load(shard["features"]) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    kinds = {name: floats if name == "masked_lm_weights" else ints for name in arrays}
    return (
        {name: kinds[name](np.atleast_1d(values[row]).tolist()) for name, values in arrays.items()}
        for row in range(len(arrays["input_ids"]))
    )




def bert_tfrecord(shard: dict) -> None:
    """create_pretraining_data.py's ``tf.train.Example`` per instance, which NGC TF1 BERT's
    ``run_pretraining.py`` parses: int64 ``input_ids``, ``input_mask``, ``segment_ids``,
    ``masked_lm_positions``, ``masked_lm_ids``, ``next_sentence_labels`` and float
    ``masked_lm_weights``."""
    import tensorflow as tf

    rows = _bert_rows(
        shard,
        lambda value: tf.train.Feature(float_list=tf.train.FloatList(value=value)),
        lambda value: tf.train.Feature(int64_list=tf.train.Int64List(value=value)),
    )
    with tf.io.TFRecordWriter(shard["partial"]) as writer:
        for features in rows:
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString(deterministic=True))
    os.replace(shard["partial"], shard["path"])


def bert_ofrecord(shard: dict) -> None:
    """The same features as OneFlow records (OneFlow-Benchmark BERT's ``OFRecordRawDecoder``
    reads them as int32, ``masked_lm_weights`` as float), framed as ``ofrecord``."""
    import struct

    from oneflow.core.record import record_pb2

    rows = _bert_rows(
        shard,
        lambda value: record_pb2.Feature(float_list=record_pb2.FloatList(value=value)),
        lambda value: record_pb2.Feature(int32_list=record_pb2.Int32List(value=value)),
    )
    with open(shard["partial"], "wb") as out:
        for features in rows:
            payload = record_pb2.OFRecord(feature=features).SerializeToString(deterministic=True)
            out.write(struct.pack("<q", len(payload)))
            out.write(payload)
    os.replace(shard["partial"], shard["path"])


WRITERS = {
    "tfrecord": tfrecord,
    "recordio": recordio,
    "ofrecord": ofrecord,
    "bert-tfrecord": bert_tfrecord,
    "bert-ofrecord": bert_ofrecord,
}


def main(argv: list[str]) -> int:
    kind, job = argv
    write = WRITERS[kind]
    with open(job) as stream:
        document = json.load(stream)
    os.chdir(document["cwd"])  # the paths are the user's, relative to where the command ran
    shards = document["shards"]
    for shard in shards:
        if os.path.exists(shard["path"]):
            continue
        try:
            write(shard)
        except Exception as error:  # noqa: BLE001 - any failure (TensorFlow's are not OSError)
            _remove_partials(shard)
            print(f"{ERROR_TAG} {shard['path']}: {error}", file=sys.stderr, flush=True)
            return 1
        print(f"wrote {shard['path']}", flush=True)
    return 0


def _remove_partials(shard: dict) -> None:
    """The failed shard's half-written files: writing is one shard at a time, so every
    ``.partial`` beside it is that shard's."""
    folder = os.path.dirname(shard["path"]) or "."
    names = [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".partial")]
    for path in [*(os.path.join(folder, n) for n in names), shard.get("partial")]:
        if path and os.path.exists(path):
            os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
