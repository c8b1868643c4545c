"""The smallest valid configuration documents, shared by the tests that mutate them."""

from __future__ import annotations

from typing import Any


def minimal_source(model_dir: str = "/workspace/src/x") -> dict[str, Any]:
    """A source.yaml document that loads (a fresh copy each call: tests mutate it)."""
    return {
        "name": "demo",
        "framework": "pytorch",
        "title": "demo",
        "repository": "https://example.invalid/demo",
        "commit": "a" * 40,
        "found": "a test",
        "image": "src-demo",
        "base_image": "demo:1",
        "parser": "dllogger",
        "workdir": "/workspace/src",
        "models": {"resnet50": {"dir": model_dir, "argv": ["run", "{batch}"]}},
    }
